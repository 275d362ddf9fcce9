// TaskQueue: the one thread-pool type. Jobs run on a fixed set of threads in
// the order they were posted (with one thread, one after another). musterd's
// request handlers (one queue per lane), the registry's launch and stop work
// and the backends' background work all run on one of these.
//
// Contract
// - post() queues a job and never waits for one. It returns false, and the
//   job is destroyed without running, when the queue is closed or already
//   holds `max_queued` jobs (the caller says "busy"). With zero threads,
//   post() runs the job before it returns (unit tests: nothing happens
//   behind their back).
// - drain() waits until every job posted before it has finished.
// - close() (and the destructor) drops the jobs that have not started and
//   waits for the running ones; later posts are refused. Dropped jobs are
//   destroyed outside the queue's lock, so a job's destructor may do work
//   (answer its request).
// - A job that throws is reported through `on_error` (default: stderr) and
//   the thread carries on. A job must not close or destroy its own queue.
// Every method may be called from any thread.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <limits>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace muster::base {

struct TaskQueueOptions {
  size_t threads = 1;
  size_t max_queued = std::numeric_limits<size_t>::max();
  std::string name = "task queue";  // in error reports
  std::function<void(const std::string& what)> on_error;
};

class TaskQueue {
 public:
  explicit TaskQueue(size_t threads) : TaskQueue(options_for(threads)) {}
  explicit TaskQueue(TaskQueueOptions options);
  ~TaskQueue();
  TaskQueue(const TaskQueue&) = delete;
  TaskQueue& operator=(const TaskQueue&) = delete;

  static TaskQueueOptions options_for(size_t threads) {
    TaskQueueOptions o;
    o.threads = threads;
    return o;
  }

  bool post(std::function<void()> job);
  void drain();
  void close();
  // Jobs waiting for a thread right now.
  size_t queued() const;

 private:
  void loop();
  void run_one(std::function<void()>& job);

  const TaskQueueOptions options_;
  mutable std::mutex mu_;
  std::condition_variable wake_;  // a job was posted, or the queue is closing
  std::condition_variable idle_;  // a job finished
  std::deque<std::function<void()>> jobs_;
  size_t running_ = 0;
  bool closing_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace muster::base
