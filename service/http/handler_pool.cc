#include "service/http/handler_pool.h"

#include <spdlog/spdlog.h>

namespace muster::service::http {

HandlerPool::HandlerPool(int threads, size_t max_queued) : max_queued_(max_queued) {
  for (int i = 0; i < std::max(threads, 1); ++i) threads_.emplace_back([this] { run(); });
}

HandlerPool::~HandlerPool() { stop(); }

bool HandlerPool::submit(std::function<void()> task) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_ || queue_.size() >= max_queued_) return false;
    queue_.push_back(std::move(task));
  }
  cv_.notify_one();
  return true;
}

void HandlerPool::stop() {
  std::deque<std::function<void()>> dropped;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    dropped.swap(queue_);
  }
  cv_.notify_all();
  for (auto& t : threads_) {
    if (t.joinable()) t.join();
  }
  threads_.clear();
  // `dropped` is destroyed here, outside the lock: a task's destructor may
  // answer its request (see ReplySlot).
}

void HandlerPool::run() {
  for (;;) {
    std::function<void()> task;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
      if (stopping_) return;
      task = std::move(queue_.front());
      queue_.pop_front();
    }
    try {
      task();
    } catch (const std::exception& e) {
      spdlog::error("request handler threw: {}", e.what());
    }
  }
}

}  // namespace muster::service::http
