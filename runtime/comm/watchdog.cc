#include "runtime/comm/watchdog.h"

#include <immintrin.h>
#include <sched.h>
#include <time.h>

#include <utility>

namespace muster::runtime::comm {

namespace {
constexpr auto kLivenessPeriod = std::chrono::milliseconds(50);
}

Watchdog::Watchdog(std::chrono::milliseconds timeout, PeerMonitor* monitor, uint64_t seq, std::string what,
                   NowFn now)
    : timeout_(timeout),
      now_(now),
      monitor_(monitor),
      seq_(seq),
      what_(std::move(what)),
      last_progress_(now_()),
      next_liveness_check_(last_progress_ + kLivenessPeriod) {}

void Watchdog::progressed() {
  exited_peer_ = nullptr;
  if (idle_rounds_ != 0) {
    idle_rounds_ = 0;
    last_progress_ = now_();
  }
}

void Watchdog::idle(int waiting_on) {
  if (abort_ && abort_->load(std::memory_order_relaxed)) {
    throw CommError(what_ + ": the communicator was closed while this op waited on " +
                        (waiting_on >= 0 ? "rank " + std::to_string(waiting_on) : std::string("its peers")),
                    -1);
  }
  ++idle_rounds_;
  if (idle_rounds_ == 1) {
    last_progress_ = now_();
    return;
  }
  // Back off. With a doorbell: spin (pause) for sleeper_spin_, then sleep on
  // it; never sched_yield, which hands this core to any other runnable
  // process for up to a whole time slice (with ranks bound to cores and one
  // more busy process on the host, 64 yields per wait made a 102 MB allreduce
  // ~15x slower), while a futex wake-up gets this thread back promptly.
  // Without one: spin briefly, yield, then sleep in growing steps.
  if (idle_rounds_ < pause_rounds_) {
    _mm_pause();
    return;
  }
  if (sleeper_) {
    if (now_() - last_progress_ < sleeper_spin_) {
      _mm_pause();
      return;
    }
    sleeper_->sleep(std::chrono::milliseconds(2));
  } else if (idle_rounds_ < 2000u) {
    sched_yield();
  } else {
    const long ns = idle_rounds_ < 4000 ? 20000 : 200000;
    timespec ts{0, ns};
    nanosleep(&ts, nullptr);
  }
  const auto now = now_();
  if (exited_peer_) std::rethrow_exception(exited_peer_);
  if (monitor_ && now >= next_liveness_check_) {
    next_liveness_check_ = now + kLivenessPeriod;
    monitor_->heartbeat();
    // A peer that exited may have left what we wait for in shared memory
    // already: fail only if the caller's next poll of its links finds nothing.
    try {
      monitor_->check_alive(what_);
    } catch (const CommError&) {
      exited_peer_ = std::current_exception();
    }
  }
  if (now - last_progress_ >= timeout_) expire(waiting_on);
}

void Watchdog::expire(int waiting_on) {
  std::string why;
  int culprit = monitor_ ? monitor_->blame(seq_, timeout_, &why) : -1;
  if (culprit < 0) culprit = waiting_on;
  std::string msg = what_ + ": ";
  if (culprit >= 0) {
    msg += "rank " + std::to_string(culprit) + " did not make progress within " +
           std::to_string(timeout_.count()) + " ms";
  } else {
    msg += "a peer did not make progress within " + std::to_string(timeout_.count()) + " ms";
  }
  if (!why.empty()) msg += " (" + why + ")";
  if (waiting_on >= 0 && waiting_on != culprit) msg += "; this rank was waiting on rank " + std::to_string(waiting_on);
  msg += ". Check that rank's log; raise MUSTER_COMM_TIMEOUT_MS if it is only slow.";
  throw TimeoutError(msg, culprit);
}

}  // namespace muster::runtime::comm
