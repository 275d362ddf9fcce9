// The Communicator's single progress thread: a FIFO of ops, run one at a time
// in submission order, each completing a Handle.
//
// Any thread may submit(); only the progress thread runs tasks, so tasks may
// keep per-op state without locks. The destructor runs what was queued, then
// joins.
#pragma once

#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

#include "runtime/comm/communicator.h"

namespace muster::runtime::comm {
namespace detail {

struct OpState {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  std::exception_ptr error;

  void finish(std::exception_ptr e);
};

}  // namespace detail

class ProgressThread {
 public:
  using Task = std::function<void()>;

  ProgressThread();
  ~ProgressThread();
  ProgressThread(const ProgressThread&) = delete;
  ProgressThread& operator=(const ProgressThread&) = delete;

  // Queues `task`; the Handle completes when it returns or throws.
  Handle submit(Task task);

 private:
  struct Item {
    Task task;
    std::shared_ptr<detail::OpState> state;
  };
  void run();

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Item> queue_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace muster::runtime::comm
