// HandlerPool: the fixed set of threads that run route handlers, so that a
// handler doing slow synchronous work (a launch on the ssh or container
// backend takes seconds) never stalls the server's I/O threads or requests
// served by other threads.
//
// Contract: submit() never blocks; it refuses (returns false) once
// `max_queued` tasks wait, and the caller answers 503. stop() lets running
// tasks finish, joins the threads and destroys the tasks still queued
// without running them. Thread-safe.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace muster::service::http {

class HandlerPool {
 public:
  HandlerPool(int threads, size_t max_queued);
  ~HandlerPool();
  HandlerPool(const HandlerPool&) = delete;
  HandlerPool& operator=(const HandlerPool&) = delete;

  bool submit(std::function<void()> task);
  void stop();

 private:
  void run();

  const size_t max_queued_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_;
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace muster::service::http
