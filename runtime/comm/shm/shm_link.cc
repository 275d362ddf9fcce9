#include "muster/runtime/comm/shm/shm_link.h"

#include <cstring>

#include "muster/runtime/error.h"

namespace muster::runtime::comm::shm {

ShmSendLink::ShmSendLink(ShmSegment* segment, int local_rank, int peer)
    : segment_(segment),
      local_rank_(local_rank),
      peer_(peer),
      channel_(segment->channel(local_rank)),
      head_(channel_->head.load(std::memory_order_relaxed)) {}

bool ShmSendLink::try_send(const void* src, std::size_t bytes) {
  MUSTER_CHECK_LE(bytes, segment_->slot_bytes(), "shm segment larger than a slot");
  const uint64_t tail = channel_->tail.load(std::memory_order_acquire);
  if (head_ - tail >= segment_->slots()) return false;
  std::memcpy(segment_->slot(local_rank_, head_ % segment_->slots()), src, bytes);
  ++head_;
  channel_->head.store(head_, std::memory_order_release);
  return true;
}

ShmRecvLink::ShmRecvLink(ShmSegment* segment, int peer_local_rank, int peer)
    : segment_(segment),
      peer_local_rank_(peer_local_rank),
      peer_(peer),
      channel_(segment->channel(peer_local_rank)),
      tail_(channel_->tail.load(std::memory_order_relaxed)) {}

const void* ShmRecvLink::try_recv() {
  if (channel_->head.load(std::memory_order_acquire) == tail_) return nullptr;
  return segment_->slot(peer_local_rank_, tail_ % segment_->slots());
}

void ShmRecvLink::release() {
  ++tail_;
  channel_->tail.store(tail_, std::memory_order_release);
}

}  // namespace muster::runtime::comm::shm
