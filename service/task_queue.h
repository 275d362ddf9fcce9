// TaskQueue: runs posted jobs on a fixed set of threads, in the order they
// were posted (with one thread, one after another); with zero threads post()
// runs the job before it returns (unit tests: nothing happens behind their
// back).
//
// Contract: post() never blocks on a job (threads > 0). drain() waits until
// every job posted before it has finished. close() (and the destructor)
// drops the jobs that have not started and waits for the running ones; a
// post() after it does nothing. A job must not close or destroy its queue.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace muster::service {

class TaskQueue {
 public:
  explicit TaskQueue(size_t threads);
  ~TaskQueue();
  TaskQueue(const TaskQueue&) = delete;
  TaskQueue& operator=(const TaskQueue&) = delete;

  void post(std::function<void()> job);
  void drain();
  void close();

 private:
  void loop();

  std::mutex mu_;
  std::condition_variable wake_;  // a job was posted, or the queue is closing
  std::condition_variable idle_;  // a job finished
  std::deque<std::function<void()>> jobs_;
  size_t running_ = 0;
  bool closing_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace muster::service
