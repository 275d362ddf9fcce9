// Links through a ShmSegment channel, for peers on this host: the ring's
// neighbours (ring channels) and every pair of ranks (mesh channels).
//
// The sender copies each segment into the next free slot and publishes it by
// advancing `head` (release); the receiver sees it by reading `head`
// (acquire), reduces or copies straight out of the slot into its own buffer,
// then frees the slot by advancing `tail`. Each byte is copied once into
// shared memory and read once out of it; no locks, no system calls.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>

#include "runtime/comm/link.h"
#include "runtime/comm/shm/shm_segment.h"
#include "runtime/comm/watchdog.h"

namespace muster::runtime::comm::shm {

// Bumps `entry`'s doorbell and wakes its rank if it sleeps on it.
void ring_doorbell(PeerEntry* entry);

// Sleeps on this rank's own doorbell (see PeerEntry).
class DoorbellSleeper : public Sleeper {
 public:
  explicit DoorbellSleeper(PeerEntry* own) : own_(own) {}
  void prepare() override;
  void sleep(std::chrono::microseconds max) override;

 private:
  PeerEntry* own_;
  uint32_t seen_ = 0;
};

class ShmSendLink : public SendLink {
 public:
  // Writes `channel` towards world rank `peer`, whose PeerEntry is `consumer`.
  ShmSendLink(const ChannelView& channel, PeerEntry* consumer, int peer);
  bool try_send(const void* src, std::size_t bytes) override;
  bool flushed() override { return true; }  // data is copied out on send
  int peer() const override { return peer_; }
  std::size_t slot_bytes() const { return channel_.slot_bytes; }

 private:
  ChannelView channel_;
  PeerEntry* consumer_;
  int peer_;
  uint64_t head_;
};

class ShmRecvLink : public RecvLink {
 public:
  // Reads `channel` from world rank `peer`, whose PeerEntry is `producer`.
  ShmRecvLink(const ChannelView& channel, PeerEntry* producer, int peer);
  void expect(std::size_t) override {}
  const void* try_recv() override;
  void release() override;
  int peer() const override { return peer_; }

 private:
  ChannelView channel_;
  PeerEntry* producer_;
  int peer_;
  uint64_t tail_;
};

}  // namespace muster::runtime::comm::shm
