// Point-to-point channels between ranks of one host (p2p_channel.h): a
// byte ring each way in the host's ShmSegment, and the futex doorbell the
// point-to-point thread sleeps on.
//
// The writer copies what fits at `head`, wrapping, and publishes it by
// advancing `head` (release); the reader copies out from `tail` straight
// into the recv's buffer and frees the room by advancing `tail`. Each side
// then rings the other's doorbell, which costs a futex call only while the
// other sleeps. Each byte is copied once into shared memory and once out.
//
// A peer is gone once its PeerEntry says it closed its Communicator or its
// process has exited; what it wrote before stays in the ring.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "runtime/comm/p2p_channel.h"
#include "runtime/comm/shm/shm_segment.h"

namespace muster::runtime::comm::shm {

class ShmP2pChannel final : public P2pChannel {
 public:
  // `out` carries this rank's bytes to world rank `peer`, `in` the peer's
  // to this rank; `peer_bell` and `peer_entry` are the peer's.
  ShmP2pChannel(const ByteRingView& out, const ByteRingView& in, P2pBell* peer_bell, const PeerEntry* peer_entry,
                int peer);
  int peer() const override { return peer_; }
  std::size_t write(const void* src, std::size_t bytes) override;
  std::size_t read(void* dst, std::size_t bytes) override;
  std::string gone() override;

 private:
  ByteRingView out_;
  ByteRingView in_;
  P2pBell* peer_bell_;
  const PeerEntry* peer_entry_;
  int peer_;
  uint64_t head_;  // of out_
  uint64_t tail_;  // of in_
};

// Sleeps on this rank's P2pBell; wake() rings it.
class P2pBellWaiter final : public P2pWaiter {
 public:
  explicit P2pBellWaiter(P2pBell* own) : own_(own) {}
  void prepare() override { seen_ = own_->bell.load(); }
  void sleep(std::chrono::microseconds max) override;
  void wake() override;

 private:
  P2pBell* own_;
  uint32_t seen_ = 0;
};

// Bumps `bell` and wakes its thread if it sleeps.
void ring_p2p_bell(P2pBell* bell);

}  // namespace muster::runtime::comm::shm
