// WorkerRegistry's agent calls (the daemon's side of api/agent_protocol.h,
// reached through service/agent_routes.cc, each already authorised for its
// worker by the agent token).
#include "service/registry/registry.h"

#include <algorithm>
#include <cstdio>

#include "service/failure_report.h"

namespace muster::service {

using api::WorkerStatus;

namespace {

std::string exit_reason(int code) {
  if (code > 128 && code < 160) {
    return "the script was killed by signal " + std::to_string(code - 128) + " (exit code " + std::to_string(code) +
           ")";
  }
  return "the script exited with code " + std::to_string(code);
}

std::string out_of_memory_reason(double memory_gb) {
  char gib[32];
  std::snprintf(gib, sizeof gib, "%.6g", memory_gb);
  return std::string("out of memory (limit ") + gib + " GiB): the kernel's OOM killer ended a process of the worker";
}

}  // namespace

// Every agent call changes memory first and then writes (registry.h,
// "Persistence"): a store that refuses the write never makes an agent retry
// or fail its worker.
api::Result<api::AgentRegistered> WorkerRegistry::agent_register(const std::string& id, const std::string& ip,
                                                                 std::optional<int> port,
                                                                 const std::map<std::string, std::string>& limits) {
  Effects fx;
  bool hold = false;
  std::chrono::milliseconds told{};
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = records_.find(id);
    if (it == records_.end()) return api::not_found("no worker '" + id + "'");
    Record& r = it->second;
    if (api::is_terminal(r.worker.status) || r.stopping) {
      return api::conflict("worker " + id + " is " +
                           (r.stopping ? std::string("being stopped") : api::worker_status_name(r.worker.status)) +
                           "; the agent must exit");
    }
    r.worker.ip_address = ip;
    r.worker.port = port;
    if (!limits.empty()) r.worker.limits = limits;
    r.last_heartbeat = clock_.now();
    if (r.worker.status == WorkerStatus::kRunning) {
      mark_dirty(r);  // re-registration (e.g. after a daemon restart)
      fx.changed.push_back(r.worker);
    } else {
      // An agent can call in before its launch step (or a queueing
      // backend's poll) has moved the worker on: it has started all the same.
      if (r.worker.status == WorkerStatus::kScheduling) transition(r, WorkerStatus::kStarting, "", fx);
      transition(r, WorkerStatus::kRunning, r.hold ? "waiting for release" : "", fx);
    }
    // Written now: a restarted daemon must know the agent registered (it
    // only heartbeats after that).
    write_dirty_locked();
    hold = r.hold && !r.release;
    r.heartbeat_every = heartbeat_interval_locked();
    told = r.heartbeat_every;
    settle_waiters(fx, false);
  }
  run(std::move(fx));
  return api::AgentRegistered{hold, told};
}

api::Result<std::chrono::milliseconds> WorkerRegistry::agent_heartbeat(const std::string& id,
                                                                       std::chrono::nanoseconds waited) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = records_.find(id);
  if (it == records_.end()) return api::not_found("no worker '" + id + "'");
  Record& r = it->second;
  if (api::is_terminal(r.worker.status) || r.stopping) {
    return api::conflict("worker " + id + " is " +
                         (r.stopping ? std::string("being stopped") : api::worker_status_name(r.worker.status)) +
                         "; the agent must stop its script and exit");
  }
  // Stamped when it arrived, not when a thread got to it.
  const auto arrived = clock_.now() - std::chrono::duration_cast<TimePoint::duration>(waited);
  const auto told = r.heartbeat_every.count() > 0 ? r.heartbeat_every : options_.heartbeat_interval;
  // Told at every beat: the fleet may have grown or shrunk since the last.
  r.heartbeat_every = heartbeat_interval_locked();
  if (arrived <= r.last_heartbeat) return r.heartbeat_every;
  if (options_.on_heartbeat_gap) {
    options_.on_heartbeat_gap(std::chrono::duration<double>(arrived - r.last_heartbeat).count(),
                              std::chrono::duration<double>(told).count());
  }
  r.last_heartbeat = arrived;
  return r.heartbeat_every;
}

// An exit reported while stop() signals the worker ends it `stopped` (the
// script died of the stop's SIGTERM); otherwise 0 from a running worker is
// success and anything else a failure. A backend whose log lags the report
// gets it held until the log is complete (registry.h, "Logs that trail the
// exit"); a report repeated meanwhile changes nothing.
api::Status WorkerRegistry::agent_exit(const std::string& id, int exit_code, bool out_of_memory) {
  // Both before the lock (a backend call, file I/O): is the log all there,
  // and a failed script's last exception line for its reason.
  const bool log_complete = backend_.log_complete(id);
  std::string exception;
  if (log_complete && exit_code != 0) {
    if (auto path = log_path(id)) exception = exit_exception(exit_code, path.value());
  }
  Effects fx;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = records_.find(id);
    if (it == records_.end()) return api::not_found("no worker '" + id + "'");
    Record& r = it->second;
    if (api::is_terminal(r.worker.status)) {
      return api::conflict("worker " + id + " is already " + api::worker_status_name(r.worker.status));
    }
    if (r.held_exit) return api::Status::ok();
    if (!log_complete && !r.stopping) {
      r.held_exit = Record::HeldExit{exit_code, out_of_memory, clock_.now() + options_.log_drain_timeout};
      return api::Status::ok();
    }
    apply_exit_locked(r, exit_code, out_of_memory, exception, fx);
    write_dirty_locked();
    settle_waiters(fx, false);
  }
  run(std::move(fx));
  return api::Status::ok();
}

void WorkerRegistry::apply_exit_locked(Record& r, int exit_code, bool out_of_memory, const std::string& exception,
                                       Effects& fx) {
  r.held_exit.reset();
  r.worker.exit_code = exit_code;
  if (r.stopping) {
    end_stopped(r, fx);
  } else if (exit_code == 0 && r.worker.status == WorkerStatus::kRunning) {
    transition(r, WorkerStatus::kSucceeded, "", fx);
  } else {
    // The cgroup's OOM kill counter said so: no guess from the signal.
    const std::string cause = out_of_memory && exit_code != 0 ? out_of_memory_reason(r.worker.memory) + "; " : "";
    transition(r, WorkerStatus::kFailed, cause + exit_reason(exit_code) + (exception.empty() ? "" : ": " + exception),
               fx);
  }
}

std::string WorkerRegistry::exit_exception(int exit_code, const std::filesystem::path& log) {
  return exit_code == 0 ? std::string() : last_exception_in(log);
}

std::optional<std::string> WorkerRegistry::worker_for_agent_token(const std::string& token) const {
  return token_to_id_.find(token);
}

double WorkerRegistry::max_heartbeat_age_seconds() const {
  const auto now = clock_.now();
  std::lock_guard<std::mutex> lock(mu_);
  double out = 0;
  for (const auto& [id, r] : records_) {
    if (r.worker.status != WorkerStatus::kRunning) continue;
    out = std::max(out, std::chrono::duration<double>(now - r.last_heartbeat).count());
  }
  return out;
}

}  // namespace muster::service
