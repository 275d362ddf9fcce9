// WorkerRegistry's records and state machine: transitions (in memory, then
// written), the effects run after the mutex is released, the queries, and
// stop. The other parts are listed in registry.h.
#include "service/registry/registry.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>

namespace muster::service {

using api::WorkerStatus;

namespace {

base::TaskQueueOptions queue_options(size_t threads, const char* name) {
  base::TaskQueueOptions o;
  o.threads = threads;
  o.name = name;
  o.on_error = [](const std::string& what) { spdlog::error("{}", what); };
  return o;
}

}  // namespace

WorkerRegistry::WorkerRegistry(RegistryOptions options, workers::Backend& backend, Store* store, const Clock& clock)
    : options_(std::move(options)),
      backend_(backend),
      store_(store),
      clock_(clock),
      stops_(queue_options(options_.async_backend ? 2 : 0, "registry stops")),
      launches_(queue_options(options_.async_backend ? std::max<size_t>(options_.launch_threads, 1) : 0,
                              "registry launches")) {
  if (!options_.gpus) options_.gpus = &no_gpus_;
}

WorkerRegistry::~WorkerRegistry() {
  std::lock_guard<std::mutex> lock(mu_);
  write_dirty_locked();
}

std::string WorkerRegistry::agent_url() const {
  return api::agent_url(backend_.master_address(), options_.daemon_port, !options_.daemon_tls_fingerprint.empty());
}

void WorkerRegistry::wait_for_launches() {
  launches_.drain();
  stops_.drain();
}

void WorkerRegistry::shutdown() {
  launches_.close();
  stops_.close();
  std::lock_guard<std::mutex> lock(mu_);
  write_dirty_locked();
}

void WorkerRegistry::transition(Record& r, WorkerStatus to, std::string reason, Effects& fx) {
  if (!api::can_transition(r.worker.status, to)) return;
  if (r.worker.status == WorkerStatus::kRunning) --running_;
  if (to == WorkerStatus::kRunning) ++running_;
  r.worker.status = to;
  r.worker.reason = std::move(reason);
  const std::string now = format_time(clock_.wall());
  if (to == WorkerStatus::kRunning) {
    r.worker.started_at = r.worker.running_at = now;
    r.running_since = clock_.now();
  }
  if (api::is_terminal(to)) {
    r.worker.finished_at = now;
    r.finished = clock_.now();
    r.stopping = false;
    // Its devices go back now (the process tree is being stopped or is gone).
    if (!r.worker.gpu_devices.empty()) options_.gpus->release(r.worker.id);
  }
  mark_dirty(r);
  fx.changed.push_back(r.worker);
}

void WorkerRegistry::end_stopped(Record& r, Effects& fx) {
  // Only a running worker can have succeeded or failed of its ranks.
  const WorkerStatus to = api::can_transition(r.worker.status, r.stop_as) ? r.stop_as : WorkerStatus::kStopped;
  if (to != WorkerStatus::kStopped && r.stop_exit_code) r.worker.exit_code = r.stop_exit_code;
  transition(r, to, r.stop_reason, fx);
}

void WorkerRegistry::run(Effects fx) {
  std::vector<Listener> listeners;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [handle, l] : listeners_) listeners.push_back(l);
  }
  for (const auto& w : fx.changed) {
    for (const auto& l : listeners) l(w);
  }
  for (auto& cb : fx.callbacks) cb();
  for (auto& id : fx.to_stop) {
    stops_.post([this, id = std::move(id)] {
      if (auto s = backend_.stop(id, options_.stop_grace); !s) {
        spdlog::error("worker {}: the backend could not stop it: {}", id, s.message());
      }
    });
  }
  if (!fx.removed.empty()) finish_removal(fx.removed);
}

void WorkerRegistry::forget(const std::vector<std::string>& ids) {
  for (const auto& id : ids) {
    auto it = records_.find(id);
    if (it == records_.end()) continue;
    options_.gpus->release(id);
    token_to_id_.erase(it->second.agent_token);
    by_seq_.erase(it->second.seq);
    dirty_.erase(id);
    erase_locked(it);
  }
}

void WorkerRegistry::erase_locked(std::map<std::string, Record>::iterator it) {
  if (it->second.worker.status == WorkerStatus::kRunning) --running_;
  records_.erase(it);
}

std::chrono::milliseconds WorkerRegistry::heartbeat_interval_locked() const {
  const auto base = options_.heartbeat_interval;
  if (options_.heartbeat_rate <= 0) return base;
  const auto stretched = std::chrono::milliseconds(
      static_cast<int64_t>(std::ceil(1000.0 * static_cast<double>(running_) / options_.heartbeat_rate)));
  return std::clamp(stretched, base, std::max(base, api::kMaxHeartbeatInterval));
}

std::chrono::milliseconds WorkerRegistry::heartbeat_timeout_for(std::chrono::milliseconds told) const {
  const auto base = options_.heartbeat_interval;
  if (told <= base || base.count() <= 0) return options_.heartbeat_timeout;
  return std::chrono::milliseconds(static_cast<int64_t>(
      std::ceil(static_cast<double>(options_.heartbeat_timeout.count()) * told.count() / base.count())));
}

std::chrono::milliseconds WorkerRegistry::heartbeat_interval_now() const {
  std::lock_guard<std::mutex> lock(mu_);
  return heartbeat_interval_locked();
}

size_t WorkerRegistry::running_workers() const {
  std::lock_guard<std::mutex> lock(mu_);
  return running_;
}

std::vector<api::Worker> WorkerRegistry::list() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<api::Worker> out;
  out.reserve(by_seq_.size());
  for (const auto& [seq, id] : by_seq_) out.push_back(records_.at(id).worker);
  return out;
}

WorkerPage WorkerRegistry::page(uint64_t from, size_t limit) const {
  std::lock_guard<std::mutex> lock(mu_);
  WorkerPage out;
  for (auto it = by_seq_.lower_bound(from); it != by_seq_.end(); ++it) {
    if (out.workers.size() == limit) {
      out.next = it->first;
      break;
    }
    out.workers.push_back(records_.at(it->second).worker);
  }
  return out;
}

std::vector<api::Worker> WorkerRegistry::page_by_id(const std::string& after, size_t limit) const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<api::Worker> out;
  for (auto it = after.empty() ? records_.begin() : records_.upper_bound(after);
       it != records_.end() && out.size() < limit; ++it) {
    out.push_back(it->second.worker);
  }
  return out;
}

std::map<api::WorkerStatus, size_t> WorkerRegistry::count_by_status() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::map<api::WorkerStatus, size_t> out;
  for (const auto& [id, r] : records_) ++out[r.worker.status];
  return out;
}

api::Result<api::Worker> WorkerRegistry::get(const std::string& id) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = records_.find(id);
  if (it == records_.end()) return api::not_found("no worker '" + id + "'");
  return it->second.worker;
}

api::Result<std::filesystem::path> WorkerRegistry::log_path(const std::string& id) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = records_.find(id);
  if (it == records_.end()) return api::not_found("no worker '" + id + "'");
  return it->second.log_path;
}

// Step by step (registry.h, "Stop"): a) under the mutex, pick the workers
// and mark those that have not finished `stopping` (a report of theirs that
// comes in meanwhile ends them `stopped`), but for those whose exit report
// is held for their log: they ended before the stop; b) without it, ask the
// backend to signal each tree, which returns once the signal is sent, and
// read the held exits' last exceptions; c) under the mutex again, apply the
// held exits, move each signalled worker to `stopped` (in memory, then
// written: a store that refuses the write does not undo the stop) and clear
// the mark of those the backend could not signal; they keep their status
// and the call fails naming them.
api::Result<std::vector<api::Worker>> WorkerRegistry::stop(const std::vector<std::string>& ids,
                                                           const std::string& reason,
                                                           const std::map<std::string, Ending>& endings) {
  std::vector<std::string> targets, signalled;
  struct Ended {
    std::string id;
    WorkerRecord::HeldExit exit;
    std::filesystem::path log;
  };
  std::vector<Ended> ended;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (ids.empty()) {
      for (const auto& [seq, id] : by_seq_) {
        if (!api::is_terminal(records_.at(id).worker.status)) targets.push_back(id);
      }
    } else {
      std::set<std::string> seen;  // a list may name a worker many times
      for (const auto& id : ids) {
        if (!records_.count(id)) return api::not_found("no worker '" + id + "'");
        if (seen.insert(id).second) targets.push_back(id);
      }
    }
    for (const auto& id : targets) {
      Record& r = records_.at(id);
      if (api::is_terminal(r.worker.status)) continue;
      if (r.held_exit) {
        ended.push_back({id, *r.held_exit, r.log_path});
        continue;
      }
      r.stopping = true;
      r.stop_reason = reason;
      auto ending = endings.find(id);
      r.stop_as = ending == endings.end() ? WorkerStatus::kStopped : ending->second.status;
      r.stop_exit_code = ending == endings.end() ? std::nullopt : ending->second.exit_code;
      signalled.push_back(id);
    }
  }
  // (A worker whose launch is with the backend right now is unknown to it:
  // start_batch() stops it again once the backend returns.)
  std::map<std::string, std::string> refused;
  for (const auto& id : signalled) {
    if (auto s = backend_.stop(id, options_.stop_grace); !s) refused[id] = s.message();
  }
  std::vector<std::string> exceptions;
  for (const auto& e : ended) exceptions.push_back(exit_exception(e.exit.exit_code, e.log));
  Effects fx;
  std::vector<api::Worker> out;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (size_t i = 0; i < ended.size(); ++i) {
      auto it = records_.find(ended[i].id);
      if (it == records_.end() || !it->second.held_exit || api::is_terminal(it->second.worker.status)) continue;
      apply_exit_locked(it->second, ended[i].exit.exit_code, ended[i].exit.out_of_memory, exceptions[i], fx);
    }
    for (const auto& id : signalled) {
      auto it = records_.find(id);
      if (it == records_.end()) continue;
      Record& r = it->second;
      if (refused.count(id)) {
        r.stopping = false;
        continue;
      }
      end_stopped(r, fx);
    }
    write_dirty_locked();
    settle_waiters(fx, false);
    for (const auto& id : targets) {
      auto it = records_.find(id);
      if (it != records_.end()) out.push_back(it->second.worker);
    }
  }
  run(std::move(fx));
  if (!refused.empty()) {
    std::string text;
    for (const auto& [id, why] : refused) {
      spdlog::error("worker {}: the backend could not stop it: {}", id, why);
      text += (text.empty() ? "" : "; ") + id + ": " + why;
    }
    return api::internal_error("the backend could not stop " + std::to_string(refused.size()) + " of " +
                               std::to_string(signalled.size()) + " worker(s), which keep their status (" + text +
                               "); the others were stopped");
  }
  return out;
}

void WorkerRegistry::stop_processes(const std::vector<std::string>& ids) {
  for (const auto& id : ids) {
    if (auto s = backend_.stop(id, options_.stop_grace); !s) {
      spdlog::error("worker {}: the backend could not stop it: {}", id, s.message());
    }
  }
}

int WorkerRegistry::subscribe(Listener listener) {
  std::lock_guard<std::mutex> lock(mu_);
  listeners_[next_listener_] = std::move(listener);
  return next_listener_++;
}

void WorkerRegistry::unsubscribe(int handle) {
  std::lock_guard<std::mutex> lock(mu_);
  listeners_.erase(handle);
}

}  // namespace muster::service
