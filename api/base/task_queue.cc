#include "api/base/task_queue.h"

#include <cstdio>
#include <exception>

namespace muster::base {

TaskQueue::TaskQueue(TaskQueueOptions options) : options_(std::move(options)) {
  for (size_t i = 0; i < options_.threads; ++i) threads_.emplace_back([this] { loop(); });
}

TaskQueue::~TaskQueue() { close(); }

void TaskQueue::close() {
  std::deque<std::function<void()>> dropped;
  {
    std::lock_guard<std::mutex> lock(mu_);
    closing_ = true;
    dropped.swap(jobs_);
  }
  wake_.notify_all();
  idle_.notify_all();
  for (auto& t : threads_) {
    if (t.joinable() && t.get_id() != std::this_thread::get_id()) t.join();
  }
  // `dropped` goes here, outside the lock.
}

bool TaskQueue::post(std::function<void()> job) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (closing_) return false;
    if (!threads_.empty()) {
      if (jobs_.size() >= options_.max_queued) return false;
      jobs_.push_back(std::move(job));
      job = nullptr;
    }
  }
  if (job) {  // no threads: run it here
    run_one(job);
    return true;
  }
  wake_.notify_one();
  return true;
}

void TaskQueue::drain() {
  std::unique_lock<std::mutex> lock(mu_);
  idle_.wait(lock, [this] { return (jobs_.empty() || closing_) && running_ == 0; });
}

size_t TaskQueue::queued() const {
  std::lock_guard<std::mutex> lock(mu_);
  return jobs_.size();
}

void TaskQueue::run_one(std::function<void()>& job) {
  try {
    job();
  } catch (const std::exception& e) {
    const std::string what = options_.name + ": a job threw: " + e.what();
    if (options_.on_error) {
      options_.on_error(what);
    } else {
      std::fprintf(stderr, "%s\n", what.c_str());
    }
  }
  job = nullptr;  // its captures go before the queue counts it done
}

void TaskQueue::loop() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    wake_.wait(lock, [this] { return closing_ || !jobs_.empty(); });
    if (closing_) return;
    auto job = std::move(jobs_.front());
    jobs_.pop_front();
    ++running_;
    lock.unlock();
    run_one(job);
    lock.lock();
    --running_;
    idle_.notify_all();
  }
}

}  // namespace muster::base
