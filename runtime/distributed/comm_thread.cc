#include "runtime/distributed/comm_thread.h"

#include <condition_variable>
#include <cstdio>
#include <deque>
#include <iterator>
#include <map>
#include <mutex>
#include <utility>

#include "runtime/error.h"

namespace muster::runtime::distributed {

struct CommThread::State {
  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::pair<Job, std::shared_ptr<std::promise<void>>>> queue;
  std::exception_ptr error;
  bool stop = false;
  bool exited = false;
};

namespace {

void run(const std::shared_ptr<CommThread::State>& s) {
  for (;;) {
    std::pair<CommThread::Job, std::shared_ptr<std::promise<void>>> item;
    std::exception_ptr earlier;
    {
      std::unique_lock<std::mutex> lock(s->mu);
      s->cv.wait(lock, [&] { return s->stop || !s->queue.empty(); });
      if (s->stop) break;
      item = std::move(s->queue.front());
      s->queue.pop_front();
      earlier = s->error;
    }
    if (earlier) {
      item.second->set_exception(earlier);
      continue;
    }
    try {
      item.first();
      item.second->set_value();
    } catch (...) {
      std::exception_ptr e = std::current_exception();
      {
        std::lock_guard<std::mutex> lock(s->mu);
        if (!s->error) s->error = e;
      }
      item.second->set_exception(e);
    }
  }
  std::lock_guard<std::mutex> lock(s->mu);
  for (auto& item : s->queue) {
    item.second->set_exception(std::make_exception_ptr(Error("DistributedOptimizer is shutting down")));
  }
  s->queue.clear();
  s->exited = true;
  s->cv.notify_all();
}

}  // namespace

CommThread::CommThread(std::string name) : name_(std::move(name)), state_(std::make_shared<State>()) {
  thread_ = std::thread([s = state_] { run(s); });
}

CommThread::~CommThread() {
  if (!shut_down_) shutdown(std::chrono::seconds(10));
}

std::shared_future<void> CommThread::submit(Job job) {
  auto promise = std::make_shared<std::promise<void>>();
  std::shared_future<void> future = promise->get_future().share();
  std::lock_guard<std::mutex> lock(state_->mu);
  if (state_->stop) {
    promise->set_exception(std::make_exception_ptr(Error("DistributedOptimizer is shutting down")));
    return future;
  }
  state_->queue.emplace_back(std::move(job), std::move(promise));
  state_->cv.notify_all();
  return future;
}

std::exception_ptr CommThread::error() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->error;
}

bool CommThread::shutdown(std::chrono::milliseconds grace) {
  if (shut_down_) return true;
  shut_down_ = true;
  bool exited;
  {
    std::unique_lock<std::mutex> lock(state_->mu);
    state_->stop = true;
    state_->cv.notify_all();
    exited = state_->cv.wait_for(lock, grace, [&] { return state_->exited; });
  }
  if (exited) {
    thread_.join();
    return true;
  }
  std::fprintf(stderr,
               "muster: %s: the communication thread is still inside a collective after %lld ms; "
               "leaving it behind so the process can exit\n",
               name_.c_str(), static_cast<long long>(grace.count()));
  thread_.detach();
  return false;
}

std::shared_ptr<SharedCommThread> SharedCommThread::acquire(const void* identity) {
  static std::mutex mu;
  static std::map<const void*, std::weak_ptr<SharedCommThread>> threads;
  std::lock_guard<std::mutex> lock(mu);
  for (auto it = threads.begin(); it != threads.end();) {
    it = it->second.expired() ? threads.erase(it) : std::next(it);
  }
  if (auto existing = threads[identity].lock()) return existing;
  auto created = std::make_shared<SharedCommThread>();
  threads[identity] = created;
  return created;
}

}  // namespace muster::runtime::distributed
