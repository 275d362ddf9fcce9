#include "runtime/comm/shm/shm_link.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <cstring>

#include "runtime/error.h"

namespace muster::runtime::comm::shm {

void ring_doorbell(PeerEntry* entry) {
  entry->doorbell.fetch_add(1);
  if (entry->sleeping.load()) {
    syscall(SYS_futex, reinterpret_cast<uint32_t*>(&entry->doorbell), FUTEX_WAKE, 1, nullptr, nullptr, 0);
  }
}

void DoorbellSleeper::prepare() { seen_ = own_->doorbell.load(); }

void DoorbellSleeper::sleep(std::chrono::microseconds max) {
  // Dekker-style with ring_doorbell: announce, then re-read the bell; a
  // ringer either sees `sleeping` and wakes us, or bumped the bell first.
  own_->sleeping.store(1);
  if (own_->doorbell.load() == seen_) {
    timespec ts{static_cast<time_t>(max.count() / 1000000), static_cast<long>(max.count() % 1000000) * 1000};
    syscall(SYS_futex, reinterpret_cast<uint32_t*>(&own_->doorbell), FUTEX_WAIT, seen_, &ts, nullptr, 0);
  }
  own_->sleeping.store(0);
}

ShmSendLink::ShmSendLink(const ChannelView& channel, PeerEntry* consumer, int peer)
    : channel_(channel), consumer_(consumer), peer_(peer),
      head_(channel.header->head.load(std::memory_order_relaxed)) {}

bool ShmSendLink::try_send(const void* src, std::size_t bytes) {
  MUSTER_CHECK_LE(bytes, channel_.slot_bytes, "shm segment larger than a slot");
  const uint64_t tail = channel_.header->tail.load(std::memory_order_acquire);
  if (head_ - tail >= channel_.n_slots) return false;
  if (bytes) std::memcpy(channel_.slot(head_), src, bytes);
  ++head_;
  channel_.header->head.store(head_, std::memory_order_release);
  ring_doorbell(consumer_);
  return true;
}

ShmRecvLink::ShmRecvLink(const ChannelView& channel, PeerEntry* producer, int peer)
    : channel_(channel), producer_(producer), peer_(peer),
      tail_(channel.header->tail.load(std::memory_order_relaxed)) {}

const void* ShmRecvLink::try_recv() {
  if (channel_.header->head.load(std::memory_order_acquire) == tail_) return nullptr;
  return channel_.slot(tail_);
}

void ShmRecvLink::release() {
  ++tail_;
  channel_.header->tail.store(tail_, std::memory_order_release);
  ring_doorbell(producer_);
}

}  // namespace muster::runtime::comm::shm
