// Ring links through a ShmSegment channel, for neighbours on this host.
//
// The sender copies each segment into the next free slot and publishes it by
// advancing `head` (release); the receiver sees it by reading `head`
// (acquire), reduces or copies straight out of the slot into its own buffer,
// then frees the slot by advancing `tail`. Each byte is copied once into
// shared memory and read once out of it; no locks, no system calls.
#pragma once

#include <cstddef>
#include <cstdint>

#include "muster/runtime/comm/link.h"
#include "muster/runtime/comm/shm/shm_segment.h"

namespace muster::runtime::comm::shm {

class ShmSendLink : public SendLink {
 public:
  // Writes channel `local_rank` (this rank's own) towards world rank `peer`.
  ShmSendLink(ShmSegment* segment, int local_rank, int peer);
  bool try_send(const void* src, std::size_t bytes) override;
  bool flushed() override { return true; }  // data is copied out on send
  int peer() const override { return peer_; }

 private:
  ShmSegment* segment_;
  int local_rank_;
  int peer_;
  ChannelHeader* channel_;
  uint64_t head_;
};

class ShmRecvLink : public RecvLink {
 public:
  // Reads channel `peer_local_rank` (the left neighbour's) from world rank `peer`.
  ShmRecvLink(ShmSegment* segment, int peer_local_rank, int peer);
  void expect(std::size_t) override {}
  const void* try_recv() override;
  void release() override;
  int peer() const override { return peer_; }

 private:
  ShmSegment* segment_;
  int peer_local_rank_;
  int peer_;
  ChannelHeader* channel_;
  uint64_t tail_;
};

}  // namespace muster::runtime::comm::shm
