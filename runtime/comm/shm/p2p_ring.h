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
//
// Single copy (point_to_point.h's kPull): a rank may read a peer's buffers
// with process_vm_readv where the kernel lets it (same user, no ptrace
// restriction in the way). settle() finds out once the peer has published
// its probe word: it reads it, and on success sets the peer's bit in this
// rank's pulls_from, which the peer's peer_pulls() reads. So a sender names
// its buffer only to a receiver that has shown it can read it.
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
  // `own_bell` is this rank's (local rank `local`), `peer_bell` the peer's
  // (local rank `peer_local`); `single_copy` false: never read the peer's
  // memory, nor let it read ours.
  ShmP2pChannel(const ByteRingView& out, const ByteRingView& in, P2pBell* own_bell, P2pBell* peer_bell,
                const PeerEntry* peer_entry, int local, int peer_local, int peer, bool single_copy);
  int peer() const override { return peer_; }
  std::size_t write(const void* src, std::size_t bytes) override;
  std::size_t read(void* dst, std::size_t bytes) override;
  std::string gone() override;
  bool peer_pulls() override;
  std::size_t pull(void* dst, uint64_t from, std::size_t bytes, std::string* error) override;
  std::size_t push(uint64_t to, const void* src, std::size_t bytes, std::string* error) override;
  bool settle() override;

 private:
  ByteRingView out_;
  ByteRingView in_;
  P2pBell* own_bell_;
  P2pBell* peer_bell_;
  const PeerEntry* peer_entry_;
  int local_;
  int peer_local_;
  int peer_;
  bool single_copy_;
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
// Publishes this process's probe word in `own` (single copy: see above).
void publish_p2p_probe(P2pBell* own);

}  // namespace muster::runtime::comm::shm
