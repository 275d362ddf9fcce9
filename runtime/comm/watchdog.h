// The deadline around every wait on a peer.
//
// A poll loop (ring step, MPI request test) calls progressed() whenever a
// peer moved and idle() whenever nothing did. idle() backs off (spin, yield,
// then short sleeps, so oversubscribed ranks leave the CPU to their peers),
// asks the PeerMonitor every 50 ms whether a peer has exited (and fails if
// the next poll still finds nothing to do), and once no
// progress has been seen for `timeout` throws TimeoutError naming the peer
// most likely at fault.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <exception>
#include <string>

#include "runtime/error.h"

namespace muster::runtime::comm {

// Knows about the other ranks' liveness (shared-memory peer table for the
// ranks of this host). Called only from the progress thread.
class PeerMonitor {
 public:
  virtual ~PeerMonitor() = default;
  // This rank starts its op number `seq` (1, 2, ...).
  virtual void begin_op(uint64_t seq) = 0;
  // This rank completed its op number `seq`: a peer that goes away after
  // it is no failure of that op.
  virtual void end_op(uint64_t seq) { (void)seq; }
  // This rank is alive and polling.
  virtual void heartbeat() = 0;
  // Throws CommError naming a monitored peer that has exited or closed its
  // Communicator before completing the op this rank is in.
  virtual void check_alive(const std::string& what) = 0;
  // Throws CommError naming a monitored peer that has exited or closed its
  // Communicator, whatever op it last completed: the next op cannot finish.
  virtual void check_gone(const std::string& what) { (void)what; }
  // This rank's Communicator is going away: a peer waiting on it fails at
  // once (its process may live on).
  virtual void mark_closed() {}
  // This rank's op failed blaming `rank` (-1 unknown): tells the peers, so
  // a survivor that exits after a failure is not taken for the culprit.
  virtual void record_failure(int rank) = 0;
  // The world rank most likely holding up op `seq` and why, or -1.
  virtual int blame(uint64_t seq, std::chrono::milliseconds timeout, std::string* why) = 0;
};

// How a waiting rank sleeps once spinning and yielding have not helped.
// The shm transport sleeps on a futex "doorbell" its peers ring whenever they
// publish or free a slot, so a waiting rank costs no CPU and wakes at once;
// without one (MPI links) the Watchdog sleeps in short steps.
class Sleeper {
 public:
  virtual ~Sleeper() = default;
  // Called before the caller re-checks its links: remembers the doorbell, so
  // a ring between the check and sleep() is not lost.
  virtual void prepare() = 0;
  // Sleeps until rung (or `max` passes).
  virtual void sleep(std::chrono::microseconds max) = 0;
};

class Watchdog {
 public:
  using Clock = std::chrono::steady_clock;
  // The time source (a seam: tests pass a fake one).
  using NowFn = Clock::time_point (*)();

  // `what` names the op in messages ("allreduce #12 (ring, 4096 float32)");
  // `monitor` may be null.
  Watchdog(std::chrono::milliseconds timeout, PeerMonitor* monitor, uint64_t seq, std::string what,
           NowFn now = &Clock::now);

  // Use `sleeper` (may be null) for the waits of this op: `pause_rounds`
  // idle polls with a pause each, then spin for `spin`, then sleep on it.
  void set_sleeper(Sleeper* sleeper, std::chrono::microseconds spin = std::chrono::microseconds(0),
                   uint32_t pause_rounds = 64) {
    sleeper_ = sleeper;
    sleeper_spin_ = spin;
    pause_rounds_ = pause_rounds;
  }
  // While *flag is true every idle() throws CommError: the Communicator is
  // being destroyed and ends the op in flight (null: never).
  void set_abort(const std::atomic<bool>* flag) { abort_ = flag; }
  // At the top of each poll round, before checking the links.
  void prepare() {
    if (sleeper_) sleeper_->prepare();
  }
  void progressed();
  // `waiting_on` is the world rank the caller waits for, or -1 (a collective).
  void idle(int waiting_on);
  const std::string& what() const { return what_; }
  // The op's sequence number (the same on every rank).
  uint64_t seq() const { return seq_; }

 private:
  [[noreturn]] void expire(int waiting_on);

  std::chrono::milliseconds timeout_;
  NowFn now_;
  PeerMonitor* monitor_;
  Sleeper* sleeper_ = nullptr;
  const std::atomic<bool>* abort_ = nullptr;
  std::chrono::microseconds sleeper_spin_{0};
  uint32_t pause_rounds_ = 64;
  uint64_t seq_;
  std::string what_;
  Clock::time_point last_progress_;
  Clock::time_point next_liveness_check_;
  uint32_t idle_rounds_ = 0;
  std::exception_ptr exited_peer_;  // seen exited; thrown unless the next poll progresses
};

}  // namespace muster::runtime::comm
