#include "runtime/comm/progress_thread.h"

#include <utility>

namespace muster::runtime::comm {

void detail::OpState::finish(std::exception_ptr e) {
  {
    std::lock_guard<std::mutex> lock(mu);
    error = std::move(e);
    done = true;
  }
  cv.notify_all();
}

Handle::Handle() = default;
Handle::Handle(std::shared_ptr<detail::OpState> state) : state_(std::move(state)) {}
Handle::Handle(Handle&&) noexcept = default;
Handle& Handle::operator=(Handle&&) noexcept = default;
Handle::~Handle() = default;

void Handle::wait() {
  if (!state_) throw InvalidArgument("Handle::wait on an empty (moved-from or default) Handle");
  std::unique_lock<std::mutex> lock(state_->mu);
  state_->cv.wait(lock, [&] { return state_->done; });
  if (state_->error) std::rethrow_exception(state_->error);
}

bool Handle::done() const {
  if (!state_) return true;
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->done;
}

ProgressThread::ProgressThread() : thread_([this] { run(); }) {}

ProgressThread::~ProgressThread() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

Handle ProgressThread::submit(Task task) {
  auto state = std::make_shared<detail::OpState>();
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(Item{std::move(task), state});
  }
  cv_.notify_one();
  return Handle(state);
}

void ProgressThread::run() {
  for (;;) {
    Item item;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping and drained
      item = std::move(queue_.front());
      queue_.pop_front();
    }
    std::exception_ptr error;
    try {
      item.task();
    } catch (...) {
      error = std::current_exception();
    }
    item.state->finish(error);
  }
}

}  // namespace muster::runtime::comm
