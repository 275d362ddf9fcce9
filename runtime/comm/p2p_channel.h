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
