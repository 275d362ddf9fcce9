// What a TCP transport's I/O threads ring when a segment has been sent or
// received (or a stream failed), and what the progress thread sleeps on
// while it waits for one: a generation counter, advanced under a mutex. prepare()
// remembers the generation before the caller polls its links, so a ring
// between that poll and wait() is not lost.
//
// Threads: any.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>

namespace muster::runtime::comm::tcp {

class ProgressBell {
 public:
  // No lock: the progress thread reads it at the top of every poll round.
  uint64_t generation() const { return generation_.load(std::memory_order_acquire); }
  void ring() {
    {
      std::lock_guard<std::mutex> lk(mu_);  // so a waiter cannot miss it
      generation_.fetch_add(1, std::memory_order_release);
      if (waiters_ == 0) return;
    }
    cv_.notify_all();
  }
  // Returns once the generation differs from `seen`, or after `max`.
  void wait(uint64_t seen, std::chrono::microseconds max) {
    std::unique_lock<std::mutex> lk(mu_);
    ++waiters_;
    cv_.wait_for(lk, max, [&] { return generation() != seen; });
    --waiters_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::atomic<uint64_t> generation_{0};  // written under mu_
  int waiters_ = 0;                      // under mu_
};

}  // namespace muster::runtime::comm::tcp
