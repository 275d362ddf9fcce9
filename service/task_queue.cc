#include "service/task_queue.h"

namespace muster::service {

TaskQueue::TaskQueue(size_t threads) {
  for (size_t i = 0; i < threads; ++i) threads_.emplace_back([this] { loop(); });
}

TaskQueue::~TaskQueue() { close(); }

void TaskQueue::close() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    closing_ = true;
    jobs_.clear();
  }
  wake_.notify_all();
  idle_.notify_all();
  for (auto& t : threads_) {
    if (t.joinable()) t.join();
  }
}

void TaskQueue::post(std::function<void()> job) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (closing_) return;
    if (!threads_.empty()) {
      jobs_.push_back(std::move(job));
      job = nullptr;
    }
  }
  if (job) {  // no threads: run it here
    job();
    return;
  }
  wake_.notify_one();
}

void TaskQueue::drain() {
  std::unique_lock<std::mutex> lock(mu_);
  idle_.wait(lock, [this] { return (jobs_.empty() || closing_) && running_ == 0; });
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
    job();
    job = nullptr;  // its captures go before the queue counts it done
    lock.lock();
    --running_;
    idle_.notify_all();
  }
}

}  // namespace muster::service
