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

void detail::OpQueue::run(Item& item) {
  std::exception_ptr error;
  try {
    item.task();
  } catch (...) {
    error = std::current_exception();
  }
  item.task = nullptr;  // the closure's captures go before the waiter returns
  item.state->finish(error);
}

bool detail::OpQueue::enter_idle() {
  std::lock_guard<std::mutex> lock(mu);
  if (running || !items.empty()) return false;
  running = true;
  return true;
}

void detail::OpQueue::leave() {
  std::unique_lock<std::mutex> lock(mu);
  running = false;
  const bool more = !items.empty() || stopping;
  lock.unlock();
  if (more) cv.notify_one();
}

void detail::OpQueue::run_here_or_wake(const OpState* state) {
  std::unique_lock<std::mutex> lock(mu);
  if (!running && !items.empty() && items.front().state.get() == state) {
    Item item = std::move(items.front());
    items.pop_front();
    running = true;
    lock.unlock();
    run(item);
    leave();
    return;
  }
  // Not next, or something runs: whoever runs goes on with the queue; if
  // nothing runs, ops are waiting for the progress thread.
  const bool wake = !running && !items.empty();
  lock.unlock();
  if (wake) cv.notify_one();
}

void detail::OpQueue::wake_for(const OpState* state) {
  std::unique_lock<std::mutex> lock(mu);
  bool queued = false;
  for (const auto& item : items) queued = queued || item.state.get() == state;
  const bool wake = queued && !running;
  lock.unlock();
  if (wake) cv.notify_one();
}

Handle::Handle() = default;
Handle::Handle(std::shared_ptr<detail::OpState> state) : state_(std::move(state)) {}
Handle::Handle(Handle&&) noexcept = default;
Handle& Handle::operator=(Handle&& other) noexcept {
  if (this != &other) {
    if (state_) {
      if (auto queue = state_->queue.lock()) queue->wake_for(state_.get());
    }
    state_ = std::move(other.state_);
  }
  return *this;
}

Handle::~Handle() {
  // Dropped without waiting: the op still runs, now.
  if (!state_) return;
  if (auto queue = state_->queue.lock()) queue->wake_for(state_.get());
}

void Handle::wait() {
  if (!state_) throw InvalidArgument("Handle::wait on an empty (moved-from or default) Handle");
  if (auto queue = state_->queue.lock()) queue->run_here_or_wake(state_.get());
  std::unique_lock<std::mutex> lock(state_->mu);
  state_->cv.wait(lock, [&] { return state_->done; });
  if (state_->error) std::rethrow_exception(state_->error);
}

bool Handle::done() const {
  if (!state_) return true;
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    if (state_->done) return true;
  }
  // Someone is asking: it must be on its way.
  if (auto queue = state_->queue.lock()) queue->wake_for(state_.get());
  return false;
}

ProgressThread::ProgressThread() : queue_(std::make_shared<detail::OpQueue>()), thread_([this] { run(); }) {}

ProgressThread::~ProgressThread() {
  {
    std::lock_guard<std::mutex> lock(queue_->mu);
    queue_->stopping = true;
  }
  queue_->cv.notify_all();
  thread_.join();
}

Handle ProgressThread::submit(Task task) {
  auto state = std::make_shared<detail::OpState>();
  state->queue = queue_;
  bool wake = false;
  {
    std::lock_guard<std::mutex> lock(queue_->mu);
    // Ops already waiting with nothing running: this one is not the caller's
    // next wait, so start them. (Nothing queued: the caller will most likely
    // wait on this op and run it itself. Something running: it goes on.)
    wake = !queue_->running && !queue_->items.empty();
    queue_->items.push_back(detail::OpQueue::Item{std::move(task), state});
  }
  if (wake) queue_->cv.notify_one();
  return Handle(state);
}

void ProgressThread::run() {
  detail::OpQueue& q = *queue_;
  for (;;) {
    detail::OpQueue::Item item;
    {
      std::unique_lock<std::mutex> lock(q.mu);
      for (;;) {
        if (!q.running && !q.items.empty()) break;
        if (q.stopping && q.items.empty() && !q.running) return;  // drained, nothing on a waiter
        // The tick also starts an op submitted without a wake-up that no
        // thread has come to wait for.
        q.cv.wait_for(lock, kStartWithin);
      }
      item = std::move(q.items.front());
      q.items.pop_front();
      q.running = true;
    }
    detail::OpQueue::run(item);
    std::lock_guard<std::mutex> lock(q.mu);
    q.running = false;
  }
}

}  // namespace muster::runtime::comm
