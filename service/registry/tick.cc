// WorkerRegistry::tick(): the timeouts (startup, heartbeat, await and
// wait-release deadlines) and what the backend can see of each worker's
// process (an agent that died, a scheduler's queue).
#include "service/registry/registry.h"

#include <algorithm>
#include <cstdio>

namespace muster::service {

namespace {

// "10 s", "20.5 s".
std::string seconds_text(std::chrono::milliseconds d) {
  char text[32];
  std::snprintf(text, sizeof text, "%g s", d.count() / 1000.0);
  return text;
}

}  // namespace

using api::WorkerStatus;

void WorkerRegistry::tick_queued(Record& r, const workers::ProcessStatus& process, TimePoint now, Effects& fx) {
  switch (process.state) {
    case workers::ProcessState::kPending:
      if (process.reason != r.worker.reason) {
        r.worker.reason = process.reason;
        mark_dirty(r);
        fx.changed.push_back(r.worker);
      }
      return;
    case workers::ProcessState::kRunning:
      // The startup timeout counts from here, not from the submission.
      r.launched_at = now;
      transition(r, WorkerStatus::kStarting, "", fx);
      return;
    case workers::ProcessState::kExited:
    case workers::ProcessState::kLost:
      r.worker.exit_code = process.exit_code;
      // (A worker that never ran cannot be lost: a node failure before the
      // start fails it.)
      transition(r,
                       process.outcome == WorkerStatus::kLost ? WorkerStatus::kFailed
                                                              : process.outcome.value_or(WorkerStatus::kFailed),
                       process.reason.empty() ? "the scheduler ended the job before it started" : process.reason, fx);
      return;
    case workers::ProcessState::kUnknown:
      // launch() records workers before it submits them; only a worker that
      // stays unknown past the startup timeout was never submitted (the
      // daemon died in between).
      if (now - r.launched_at > options_.startup_timeout) {
        transition(r, WorkerStatus::kFailed,
                         "the scheduler has no job for this worker (the daemon restarted while launching it)", fx);
      }
      return;
  }
}

// The sweep: tick() does not visit every record every tick. It visits all
// of them while there are at most `sweep_all` (1,000: every test and most
// daemons), and beyond that 1/`sweep_ticks` of them per tick, resuming
// where the last tick stopped, so each worker's process is polled and its
// timeouts checked at least once per sweep_ticks ticks (1 s at the
// daemon's 100 ms): a timeout or a dead agent is noticed at most that much
// later, and the registry's mutex is held for a bounded slice, not a scan
// of 30,000 records ten times a second (bench/fleet, docs/ARCHITECTURE.md,
// "At fleet scale").
//
// Step by step: a) under the mutex, pick the workers whose process to ask
// about (not those whose launch is with the backend right now, nor, for a
// backend that does not queue, `scheduling` ones: their launch step decides),
// and those whose exit report is held for their log (registry.h, "Logs that
// trail the exit"), which are not polled: they have ended; b) without it,
// poll the backend for each (a backend may take seconds: the container
// backend tears namespaces down there), and take the held exits whose log is
// complete or whose time is up, with their logs' last exception; c) under
// the mutex again, apply those exits and what was seen and the timeouts to
// the workers that are still in the state they were in at a), admit the
// waiting workers that fit now, and settle the long-polls. A queueing
// backend's `scheduling` workers are watched too (tick_queued()).
void WorkerRegistry::tick() {
  std::vector<std::pair<std::string, WorkerStatus>> watched;
  struct Held {
    std::string id;
    Record::HeldExit exit;
    std::filesystem::path log;
    std::string exception;
  };
  std::vector<Held> held;
  {
    std::lock_guard<std::mutex> lock(mu_);
    // This tick's slice of the sweep (above): every record
    // up to sweep_all of them, else 1/sweep_ticks of them, from where the
    // last tick stopped, so each is visited at least once per sweep_ticks.
    const size_t ticks = std::max<size_t>(1, options_.sweep_ticks);
    const size_t budget = std::min(records_.size(), std::max(options_.sweep_all, (records_.size() + ticks - 1) / ticks));
    auto it = records_.upper_bound(sweep_cursor_);
    for (size_t visited = 0; visited < budget; ++visited, ++it) {
      if (it == records_.end()) it = records_.begin();
      const auto& [id, r] = *it;
      sweep_cursor_ = id;
      const WorkerStatus s = r.worker.status;
      if (api::is_terminal(s) || r.launching || r.stopping) continue;
      if (r.held_exit) {
        held.push_back({id, *r.held_exit, r.log_path, ""});
        continue;
      }
      if (s != WorkerStatus::kScheduling || backend_.queues_workers()) watched.emplace_back(id, s);
    }
  }
  std::vector<workers::ProcessStatus> seen;
  seen.reserve(watched.size());
  for (const auto& [id, s] : watched) seen.push_back(backend_.poll(id));
  std::vector<Held> ready;
  for (auto& h : held) {
    if (clock_.now() < h.exit.until && !backend_.log_complete(h.id)) continue;
    h.exception = exit_exception(h.exit.exit_code, h.log);
    ready.push_back(std::move(h));
  }

  Effects fx;
  {
    std::lock_guard<std::mutex> lock(mu_);
    const TimePoint now = clock_.now();
    for (const auto& h : ready) {
      auto it = records_.find(h.id);
      if (it == records_.end() || !it->second.held_exit || api::is_terminal(it->second.worker.status)) continue;
      apply_exit_locked(it->second, h.exit.exit_code, h.exit.out_of_memory, h.exception, fx);
    }
    for (size_t i = 0; i < watched.size(); ++i) {
      const auto& [id, was] = watched[i];
      auto it = records_.find(id);
      if (it == records_.end() || it->second.worker.status != was || it->second.stopping ||
          it->second.held_exit) {
        continue;  // changed meanwhile (an exit held since a) is applied by a later tick)
      }
      Record& r = it->second;
      const WorkerStatus s = r.worker.status;
      const workers::ProcessStatus& process = seen[i];
      if (s == WorkerStatus::kScheduling) {
        tick_queued(r, process, now, fx);
        continue;
      }
      if (process.state == workers::ProcessState::kExited && process.outcome) {
        r.worker.exit_code = process.exit_code;
        transition(r, *process.outcome, process.reason, fx);
      } else if (process.state == workers::ProcessState::kExited && process.exit_code == 0 &&
                 s == WorkerStatus::kRunning) {
        // The agent exits with the script's code after reporting it; its
        // report did not arrive (the daemon was busy, restarting or could
        // not write), but a clean exit is a clean exit.
        r.worker.exit_code = 0;
        transition(r, WorkerStatus::kSucceeded, "the script exited with code 0 (the agent's report did not arrive)",
                   fx);
      } else if (process.state == workers::ProcessState::kExited) {
        // The agent reports the script's exit before it exits itself, so
        // an agent that is gone while the worker is not finished died.
        r.worker.exit_code = process.exit_code;
        transition(r, WorkerStatus::kFailed,
                         "the agent exited (code " + std::to_string(process.exit_code.value_or(-1)) +
                             ") without reporting the script's exit; see the worker's log",
                         fx);
      } else if (s == WorkerStatus::kStarting && now - r.launched_at > options_.startup_timeout) {
        transition(r, WorkerStatus::kTimedOut,
                         "the agent did not register within the startup timeout (" +
                             std::to_string(options_.startup_timeout.count() / 1000.0) + " s); see the worker's log",
                         fx);
        fx.to_stop.push_back(id);
      } else if (s == WorkerStatus::kRunning && now - r.last_heartbeat > heartbeat_timeout_for(r.heartbeat_every)) {
        // Counted in the interval this agent was told (registry.h,
        // "Heartbeats at fleet scale").
        transition(r, WorkerStatus::kLost,
                   "no heartbeat from the agent for " + seconds_text(heartbeat_timeout_for(r.heartbeat_every)),
                   fx);
        fx.to_stop.push_back(id);
      } else if (process.state == workers::ProcessState::kLost) {
        transition(r, WorkerStatus::kLost,
                         process.reason.empty() ? "the backend lost the worker" : process.reason, fx);
      }
    }
    admit_waiting_locked(fx);  // what ended this pass (or since the last) made room
    expire_release_waiters(now, fx);
    settle_waiters(fx, /*at_tick=*/true);
    apply_retention(fx);
    write_dirty_locked();  // this pass's changes, and any the store refused before
  }
  run(std::move(fx));
}

}  // namespace muster::service
