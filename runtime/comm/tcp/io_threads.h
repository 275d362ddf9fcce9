// The I/O threads of a TcpSender or TcpReceiver (one per stream) and what
// they share with the progress thread: the mutex that guards the owner's
// queue (never held across a system call), the condition variable that says
// work was queued, the stop flag, and the first stream failure, which the
// owner's next call rethrows.
//
// Threads: stop() and start() from the owner's thread; the rest under `mu`.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace muster::runtime::comm::tcp {

struct IoThreads {
  std::mutex mu;
  std::condition_variable work;  // the owner queued work (or stopping)
  bool stopping = false;
  std::exception_ptr failure;
  std::vector<std::thread> threads;

  // body(s) runs on stream s's thread until it returns.
  void start(std::size_t streams, const std::function<void(std::size_t)>& body) {
    for (std::size_t s = 0; s < streams; ++s) threads.emplace_back([body, s] { body(s); });
  }
  // Joins them; the owner calls it before its sockets and buffers go.
  void stop() noexcept {
    if (threads.empty()) return;
    {
      std::lock_guard<std::mutex> lk(mu);
      stopping = true;
    }
    work.notify_all();
    for (auto& t : threads) t.join();
    threads.clear();
  }
  // From a thread: keeps the first failure.
  void fail(std::exception_ptr e) {
    std::lock_guard<std::mutex> lk(mu);
    if (!failure) failure = std::move(e);
  }
  void rethrow_locked() const {
    if (failure) std::rethrow_exception(failure);
  }
};

}  // namespace muster::runtime::comm::tcp
