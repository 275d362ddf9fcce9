// CommThread: the DistributedOptimizer's background communication thread.
//
// Jobs run one at a time in submission order, so every rank issues its
// collectives in the same order however its user thread interleaves calls.
// The first error a job throws is sticky: it completes that job's future and
// every later job's future without running them (after a failed collective
// the communicator is broken and the ranks are out of step).
//
// Shutdown never hangs the process: shutdown(grace) asks the thread to stop
// after its current job and joins it if it exits within `grace`; otherwise
// (a collective stuck past its own watchdog) it detaches it and says so on
// stderr. Jobs must therefore only touch state they co-own (shared_ptr).
//
// Thread-safe.
#pragma once

#include <chrono>
#include <exception>
#include <functional>
#include <future>
#include <memory>
#include <string>
#include <thread>

namespace muster::runtime::distributed {

class CommThread {
 public:
  using Job = std::function<void()>;

  explicit CommThread(std::string name);
  ~CommThread();  // shutdown(10 s) unless already shut down
  CommThread(const CommThread&) = delete;
  CommThread& operator=(const CommThread&) = delete;

  // Runs `job` after every job submitted before it. The future rethrows the
  // job's error, or the first earlier error (then `job` does not run).
  std::shared_future<void> submit(Job job);

  // The first error any job threw; nullptr while none did.
  std::exception_ptr error() const;

  // Stops accepting jobs, drops queued ones (their futures get an Error),
  // and waits up to `grace` for the running one. True if the thread was
  // joined, false if it had to be detached.
  bool shutdown(std::chrono::milliseconds grace);

  struct State;

 private:
  std::string name_;
  std::shared_ptr<State> state_;
  std::thread thread_;
  bool shut_down_ = false;
};

// One CommThread per communicator, shared by every DistributedOptimizer on
// it, plus which optimizer has a step in flight (the others must wait for it
// to be synchronized: their jobs would queue behind its step).
struct SharedCommThread {
  CommThread thread{"DistributedOptimizer"};
  const void* step_owner = nullptr;  // user thread only

  // The thread of the communicator `identity`; a new one when none is alive.
  static std::shared_ptr<SharedCommThread> acquire(const void* identity);
};

}  // namespace muster::runtime::distributed
