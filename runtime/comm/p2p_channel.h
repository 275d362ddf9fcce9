// The point-to-point engine's view of a transport (point_to_point.h): an
// in-order stream of bytes to one peer and one from it, carrying nothing
// but point-to-point messages (the collectives' links never do).
//
// Implementations: shm/p2p_ring.h (a byte ring each way in the host's
// segment, for ranks on one host) and tcp/p2p_stream.h (a TCP stream of its
// own per pair of ranks that reach each other over TCP).
//
// Threads: the engine's thread calls everything, except P2pWaiter::wake().
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>

namespace muster::runtime::comm {

class P2pChannel {
 public:
  virtual ~P2pChannel() = default;
  virtual int peer() const = 0;
  // Copies up to `bytes` from `src` into the stream; returns how many it
  // took, 0 when the stream is full (or broken: gone() then says why).
  virtual std::size_t write(const void* src, std::size_t bytes) = 0;
  // Moves up to `bytes` of what has arrived into `dst` (null: drops them);
  // returns how many, 0 when nothing is there (or the stream broke).
  virtual std::size_t read(void* dst, std::size_t bytes) = 0;
  // Why the peer can no longer take part ("exited", "closed its
  // communicator", the socket's error), or "" while it can. What the peer
  // wrote before it went stays readable. May cost a system call or two:
  // the engine asks every 50 ms at most.
  virtual std::string gone() = 0;

  // Single copy (point_to_point.h's kPull). Whether the peer can read this
  // rank's memory directly, so a large send need only name its buffer.
  virtual bool peer_pulls() { return false; }
  // Reads `bytes` at address `from` of the peer's memory into `dst`; how many
  // it read, 0 with *error set when it cannot.
  virtual std::size_t pull(void* dst, uint64_t from, std::size_t bytes, std::string* error) {
    (void)dst;
    (void)from;
    (void)bytes;
    *error = "this channel cannot read its peer's memory";
    return 0;
  }
  // Writes `bytes` from `src` to address `to` of the peer's memory; how many
  // it wrote, 0 with *error set when it cannot.
  virtual std::size_t push(uint64_t to, const void* src, std::size_t bytes, std::string* error) {
    (void)to;
    (void)src;
    (void)bytes;
    *error = "this channel cannot write its peer's memory";
    return 0;
  }
  // Called by the engine's thread on every idle pass until it returns true:
  // whatever the channel sets up once the peer is there (the shm channel
  // checks that it can read the peer's memory and tells the peer so).
  virtual bool settle() { return true; }
};

// How the engine's thread waits when nothing moved, and how a caller's
// thread wakes it (a new op, closing).
class P2pWaiter {
 public:
  virtual ~P2pWaiter() = default;
  // Before the thread polls its channels: a wake-up (or a peer's) between
  // the poll and sleep() is not lost.
  virtual void prepare() = 0;
  // Until woken, a peer moved bytes on a channel, or `max` has passed.
  virtual void sleep(std::chrono::microseconds max) = 0;
  // Any thread of this process.
  virtual void wake() = 0;
};

}  // namespace muster::runtime::comm
