// The Communicator's ops, run one at a time in submission order, each
// completing a Handle: by the progress thread, or by the thread that waits
// on the op when nothing runs before it.
//
// Who runs an op. submit() appends it to a FIFO. When the queue was empty
// and no op is running, the progress thread is not woken: the op waits a
// moment for its caller, since most callers wait at once (a synchronous
// allreduce is allreduce_async + wait). Handle::wait() on an op that is at
// the head of the queue with nothing running takes it and runs it on the
// waiting thread, so a small op costs no thread hand-off and no futex wake-up
// on either side. Otherwise the progress thread runs it: it is woken by the
// next submit(), by a wait() or done() on the op or the Handle's
// destruction, or at the latest after kStartWithin. Either way ops run one
// at a time and in submission order (the `running` flag under the queue's
// mutex), so tasks may keep per-op state without locks of their own.
//
// The destructor runs what was queued, then joins.
#pragma once

#include <chrono>
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

struct OpQueue;

struct OpState {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  std::exception_ptr error;
  // The queue it waits in, so a waiter can run it (expired once it is done).
  std::weak_ptr<OpQueue> queue;

  void finish(std::exception_ptr e);
};

// The FIFO shared by the ProgressThread and the Handles of its ops.
struct OpQueue {
  using Task = std::function<void()>;
  struct Item {
    Task task;
    std::shared_ptr<OpState> state;
  };

  std::mutex mu;
  std::condition_variable cv;  // the progress thread waits on it
  std::deque<Item> items;
  bool running = false;   // an op is running (on the progress thread or a waiter)
  bool stopping = false;

  // Runs `item` on this thread and completes its state.
  static void run(Item& item);
  // Called by a waiter of `state`: runs it here if it is next and nothing
  // runs; else makes sure the progress thread will.
  void run_here_or_wake(const OpState* state);
  // Wakes the progress thread if `state` is still queued.
  void wake_for(const OpState* state);
  // run_if_idle's two halves: takes the queue when it is empty and idle;
  // gives it back, waking the progress thread for what queued meanwhile.
  bool enter_idle();
  void leave();
};

}  // namespace detail

class ProgressThread {
 public:
  using Task = detail::OpQueue::Task;
  // A queued op no thread waits on starts at the latest this long after
  // submit() (the progress thread's idle tick), when nothing else woke it.
  static constexpr std::chrono::milliseconds kStartWithin{5};

  ProgressThread();
  ~ProgressThread();
  ProgressThread(const ProgressThread&) = delete;
  ProgressThread& operator=(const ProgressThread&) = delete;

  // Queues `task`; the Handle completes when it returns or throws.
  Handle submit(Task task);

  // Runs `body` on the calling thread, now, when nothing is queued or
  // running (true), as if it had been submitted and waited on at once but
  // with no Handle: no shared state, no closure on the heap, no condition
  // variable. False, without running it, when other ops come first: the
  // caller then submits. Ops others queue meanwhile run after it. `body`'s
  // exception propagates.
  template <typename F>
  bool run_if_idle(F&& body) {
    if (!queue_->enter_idle()) return false;
    struct Leave {
      detail::OpQueue& q;
      ~Leave() { q.leave(); }
    } leave{*queue_};
    body();
    return true;
  }

 private:
  void run();

  std::shared_ptr<detail::OpQueue> queue_;
  std::thread thread_;
};

}  // namespace muster::runtime::comm
