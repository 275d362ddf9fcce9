// WorkerRegistry::launch() and the backend step it queues (registry.h,
// "Launch"): the records are stored first, the backend is asked later, on a
// launch thread, and the batch stays all-or-nothing.
#include <spdlog/spdlog.h>

#include <list>
#include <system_error>

#include "api/agent_protocol.h"
#include "api/log_capture.h"
#include "service/random_hex.h"
#include "service/registry/registry.h"

namespace muster::service {

namespace fs = std::filesystem;
using api::WorkerStatus;

namespace {

// Removes the directories of a launch that did not happen.
void remove_dirs(const std::vector<fs::path>& dirs) {
  for (const auto& dir : dirs) {
    std::error_code ec;
    fs::remove_all(dir, ec);
    if (ec) spdlog::warn("cannot remove {} of a launch that failed: {}", dir.string(), ec.message());
  }
}

}  // namespace

api::Result<std::vector<api::Worker>> WorkerRegistry::launch(const LaunchBatch& batch,
                                                             std::vector<std::string>* warnings) {
  auto launched = launch_together({batch}, warnings);
  if (!launched) return launched.status();
  return std::move(launched.value().front());
}

// Step by step: a) without the mutex, a record per worker of every batch
// (status `scheduling`, a fresh id and agent token, its directory created);
// b) under the mutex: the live-worker bound, ids still unique, admission's
// refusal of what could never fit, the GPUs of every batch (all or nothing),
// admission (which workers wait for room, see registry.h), the records, and
// every record in one store transaction; c) the agents' environments (they
// name the GPUs), the backend step of the admitted workers queued
// (start_batch, one for the whole launch) and the waiting ones put in line;
// the workers are returned as they are at that moment. Any failure removes
// the launch's records and directories and returns the error.
api::Result<std::vector<std::vector<api::Worker>>> WorkerRegistry::launch_together(
    const std::vector<LaunchBatch>& batches, std::vector<std::string>* warnings) {
  std::vector<std::vector<std::string>> agent_argv;
  for (const auto& batch : batches) {
    const api::LaunchRequest& req = batch.request;
    if (!batch.per_worker.empty() && batch.per_worker.size() != static_cast<size_t>(req.n)) {
      return api::invalid_argument("per-worker options must be given for all " + std::to_string(req.n) + " workers");
    }
    api::AgentCommand command;
    command.kernel = req.kernel;
    command.code = req.code;
    if (req.code.empty()) command.script = req.script_path.string();
    command.args = req.args;
    command.python = req.python;
    agent_argv.push_back(api::to_argv(options_.agent_path.string(), command));
  }

  // a)
  const TimePoint now = clock_.now();
  const std::string created_at = format_time(clock_.wall());
  std::vector<Record> fresh;
  std::vector<fs::path> dirs;
  struct Place {
    size_t batch = 0;
    size_t index = 0;  // in its batch
  };
  std::vector<Place> places;
  for (size_t b = 0; b < batches.size(); ++b) {
    const LaunchBatch& batch = batches[b];
    const api::LaunchRequest& req = batch.request;
    for (int i = 0; i < req.n; ++i) {
      const WorkerExtras* extras = batch.per_worker.empty() ? nullptr : &batch.per_worker[static_cast<size_t>(i)];
      Record r;
      r.worker.id = random_hex(5);
      r.worker.cpu = req.cpu;
      r.worker.memory = req.memory;
      r.worker.nvidia_gpu = req.nvidia_gpu;
      r.worker.kernel = req.kernel;
      r.worker.script = req.script;
      r.worker.cluster_id = batch.cluster_id;
      r.worker.created_at = created_at;
      r.agent_token = random_hex(32);
      r.hold = extras && extras->hold;
      r.reserve_port = extras && extras->reserve_port;
      r.launched_at = now;
      r.last_heartbeat = now;
      r.launching = true;
      const fs::path dir = options_.state_dir / "workers" / r.worker.id;
      std::error_code ec;
      if (!fs::create_directories(dir, ec) || ec) {
        remove_dirs(dirs);
        return api::internal_error("cannot create the worker directory " + dir.string() + ": " +
                                   (ec ? ec.message() : "it exists already"));
      }
      dirs.push_back(dir);
      r.log_path = dir / "output.log";
      fresh.push_back(std::move(r));
      places.push_back({b, static_cast<size_t>(i)});
    }
  }
  // Admission's units: each worker of a plain launch, or the whole launch of
  // a cluster (it runs whole or waits whole).
  const bool whole = !batches.empty() && batches.front().cluster_id.has_value();
  std::vector<std::vector<size_t>> units;
  for (size_t i = 0; i < fresh.size(); ++i) {
    if (!whole || units.empty()) units.emplace_back();
    units.back().push_back(i);
  }
  auto demand_of = [&](const std::vector<size_t>& unit) {
    Demand d;
    for (size_t i : unit) d += Demand{fresh[i].worker.cpu, fresh[i].worker.memory};
    return d;
  };

  // b)
  std::vector<std::string> ids;
  std::vector<std::string> devices_of;  // per worker, "" = none
  std::vector<std::string> tokens;
  std::vector<std::string> told;  // warnings
  std::vector<size_t> waiting_units;  // indices into units
  Effects fx;
  {
    std::lock_guard<std::mutex> lock(mu_);
    size_t live = 0;
    for (const auto& [id, r] : records_) live += api::is_terminal(r.worker.status) ? 0 : 1;
    if (live + fresh.size() > options_.retention.max_live) {
      remove_dirs(dirs);
      return api::conflict("musterd runs " + std::to_string(live) + " unfinished worker(s); " +
                           std::to_string(fresh.size()) + " more would pass its limit of " +
                           std::to_string(options_.retention.max_live) +
                           " (musterd --max-live-workers); stop some first");
    }
    for (const auto& r : fresh) {
      if (records_.count(r.worker.id)) {  // 40 random bits met an existing id: rare, so just refuse
        remove_dirs(dirs);
        return api::unavailable("worker id " + r.worker.id + " is taken; launch again");
      }
    }
    if (options_.capacity && !options_.overcommit) {
      for (const auto& unit : units) {
        const Shortfall alone = shortfall(*options_.capacity, {}, demand_of(unit));
        if (!alone.any()) continue;
        remove_dirs(dirs);
        return api::conflict(never_fits(*options_.capacity, alone,
                                        whole ? "this cluster's " + std::to_string(fresh.size()) + " workers"
                                              : "a worker"));
      }
    }
    std::vector<GpuInventory::Request> wants;
    for (size_t i = 0; i < fresh.size(); ++i) {
      wants.push_back({fresh[i].worker.id, batches[places[i].batch].request.nvidia_gpu});
    }
    auto devices = options_.gpus->reserve(wants);
    if (!devices) {
      remove_dirs(dirs);
      return devices.status();
    }
    if (options_.capacity) {
      Demand in_use = in_use_locked();
      if (options_.overcommit) {
        Demand all;
        for (const auto& unit : units) all += demand_of(unit);
        const Shortfall s = shortfall(*options_.capacity, in_use, all);
        if (s.any()) told.push_back(overcommit_warning(*options_.capacity, s, in_use));
      } else {
        std::string first_reason;
        size_t waiting_workers = 0;
        for (size_t u = 0; u < units.size(); ++u) {
          const Demand ask = demand_of(units[u]);
          const Shortfall s = shortfall(*options_.capacity, in_use, ask);
          if (!s.any()) {
            in_use += ask;
            continue;
          }
          const std::string reason = wait_reason(*options_.capacity, s);
          if (first_reason.empty()) first_reason = reason;
          for (size_t i : units[u]) {
            fresh[i].waiting = true;
            fresh[i].launching = false;
            fresh[i].worker.reason = reason;
          }
          waiting_units.push_back(u);
          waiting_workers += units[u].size();
        }
        if (waiting_workers > 0) {
          told.push_back(std::to_string(waiting_workers) + " of " + std::to_string(fresh.size()) +
                         " worker(s) wait in scheduling until this host has room (musterd --overcommit=false): " +
                         first_reason);
        }
      }
    }
    std::vector<StoredRecord> rows;
    rows.reserve(fresh.size());
    for (size_t i = 0; i < fresh.size(); ++i) {
      Record& r = fresh[i];
      if (!devices.value()[i].empty()) r.worker.gpu_devices = device_list(devices.value()[i]);
      r.seq = next_seq_++;
      rows.push_back(StoredRecord{r.worker.id, r.seq, record_to_json(r)});
      devices_of.push_back(r.worker.gpu_devices);
      tokens.push_back(r.agent_token);
      ids.push_back(r.worker.id);
      fx.changed.push_back(r.worker);
      token_to_id_.set(r.agent_token, r.worker.id);
      by_seq_[r.seq] = r.worker.id;
      records_[r.worker.id] = std::move(r);
    }
    if (store_) {
      if (auto s = store_->put(rows); !s) {
        forget(ids);
        remove_dirs(dirs);
        return s;
      }
    }
  }

  // c)
  const std::string master_ip = backend_.master_address();
  const std::string url = agent_url();
  std::vector<workers::LaunchSpec> specs;
  specs.reserve(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    const LaunchBatch& batch = batches[places[i].batch];
    const api::LaunchRequest& req = batch.request;
    const WorkerExtras* extras = batch.per_worker.empty() ? nullptr : &batch.per_worker[places[i].index];
    workers::LaunchSpec spec;
    spec.worker_id = ids[i];
    spec.cpu = req.cpu;
    spec.memory_gb = req.memory;
    spec.nvidia_gpu = req.nvidia_gpu;
    spec.agent_argv = agent_argv[places[i].batch];
    spec.working_dir = dirs[i];
    spec.log_path = dirs[i] / "output.log";
    spec.log_limits = options_.worker_log;
    spec.env = req.env;
    if (extras) {
      for (const auto& [k, v] : extras->env) spec.env[k] = v;
    }
    // Where the script's Python finds muster (after the user's own PYTHONPATH).
    for (const auto& [k, v] : python_env(options_.worker_python, req.env)) spec.env[k] = v;
    api::AgentEnvironment env;
    env.url = url;
    env.worker_id = ids[i];
    env.master_ip = master_ip;
    env.heartbeat = options_.heartbeat_interval;
    env.stop_grace = options_.stop_grace;
    env.reserve_port = extras && extras->reserve_port;
    env.cpu = req.cpu;
    env.memory_gb = req.memory;
    if (options_.metrics_token) env.metrics_token = options_.metrics_token(ids[i]);
    env.project_dir = options_.project_dir.string();
    env.gpu_devices = devices_of[i];
    env.tls_fingerprint = options_.daemon_tls_fingerprint;
    env.token = tokens[i];
    for (auto& [k, v] : api::to_env(env)) spec.env[k] = std::move(v);
    api::add_log_capture_env(spec.env, {spec.log_path.string(), options_.worker_log});
    specs.push_back(std::move(spec));
  }
  std::vector<bool> waits(ids.size(), false);
  std::list<Waiting> in_line;
  for (size_t u : waiting_units) {
    Waiting w;
    for (size_t i : units[u]) {
      waits[i] = true;
      w.ids.push_back(ids[i]);
      w.specs.push_back(std::move(specs[i]));
    }
    in_line.push_back(std::move(w));
  }
  std::vector<std::string> start_ids;
  std::vector<workers::LaunchSpec> start_specs;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (waits[i]) continue;
    start_ids.push_back(ids[i]);
    start_specs.push_back(std::move(specs[i]));
  }
  run(std::move(fx));
  if (!start_ids.empty()) {
    launches_.post([this, start_ids, specs = std::move(start_specs)]() mutable {
      start_batch(start_ids, std::move(specs));
    });
  }
  std::vector<std::vector<api::Worker>> out(batches.size());
  std::lock_guard<std::mutex> lock(mu_);
  waiting_.splice(waiting_.end(), in_line);
  for (size_t i = 0; i < ids.size(); ++i) {
    auto it = records_.find(ids[i]);
    if (it != records_.end()) out[places[i].batch].push_back(it->second.worker);
  }
  if (warnings) {
    for (auto& w : told) warnings->push_back(std::move(w));
  }
  return out;
}

Demand WorkerRegistry::in_use_locked() const {
  Demand d;
  for (const auto& [id, r] : records_) {
    if (api::is_terminal(r.worker.status) || r.waiting) continue;
    d += Demand{r.worker.cpu, r.worker.memory};
  }
  return d;
}

// Under the mutex, from tick(): each waiting entry in launch order is
// admitted once its live workers fit beside what is in use (they become
// `launching` and their backend step is queued), or keeps waiting with its
// reason brought up to date; an entry whose workers all ended (stopped
// while waiting) is dropped.
void WorkerRegistry::admit_waiting_locked(Effects& fx) {
  if (!options_.capacity || waiting_.empty()) return;
  Demand in_use = in_use_locked();
  for (auto it = waiting_.begin(); it != waiting_.end();) {
    std::vector<size_t> live;
    Demand ask;
    for (size_t i = 0; i < it->ids.size(); ++i) {
      auto r = records_.find(it->ids[i]);
      if (r == records_.end() || api::is_terminal(r->second.worker.status) || !r->second.waiting) continue;
      live.push_back(i);
      ask += Demand{r->second.worker.cpu, r->second.worker.memory};
    }
    if (live.empty()) {
      it = waiting_.erase(it);
      continue;
    }
    const Shortfall s = shortfall(*options_.capacity, in_use, ask);
    if (s.any()) {
      const std::string reason = wait_reason(*options_.capacity, s);
      for (size_t i : live) {
        Record& r = records_.at(it->ids[i]);
        if (r.worker.reason == reason) continue;
        r.worker.reason = reason;
        mark_dirty(r);
        fx.changed.push_back(r.worker);
      }
      ++it;
      continue;
    }
    in_use += ask;
    std::vector<std::string> ids;
    std::vector<workers::LaunchSpec> specs;
    for (size_t i : live) {
      Record& r = records_.at(it->ids[i]);
      r.waiting = false;
      r.launching = true;
      r.worker.reason.clear();
      mark_dirty(r);
      fx.changed.push_back(r.worker);
      ids.push_back(it->ids[i]);
      specs.push_back(std::move(it->specs[i]));
    }
    queue_start(std::move(ids), std::move(specs), fx);
    it = waiting_.erase(it);
  }
}

void WorkerRegistry::queue_start(std::vector<std::string> ids, std::vector<workers::LaunchSpec> specs, Effects& fx) {
  fx.callbacks.push_back([this, ids = std::move(ids), specs = std::move(specs)] {
    launches_.post([this, ids, specs]() mutable { start_batch(ids, std::move(specs)); });
  });
}

// On a launch thread. Step by step: a) leave out the workers stopped since
// launch() (nothing to start); b) ask the backend to start the rest (it
// starts all or none); c) on failure, stop every worker of the batch (in case
// the backend left one running) and fail them all with its reason; on
// success, keep each agent's process identity and move the workers that are
// still `scheduling` to `starting` (a queueing backend's stay `scheduling`
// until the scheduler starts them, see tick_queued()); a worker stopped while
// the backend worked is stopped again now that the backend knows it.
void WorkerRegistry::start_batch(const std::vector<std::string>& ids, std::vector<workers::LaunchSpec> specs) {
  std::vector<workers::LaunchSpec> wanted;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& spec : specs) {
      auto it = records_.find(spec.worker_id);
      if (it != records_.end() && !api::is_terminal(it->second.worker.status)) wanted.push_back(std::move(spec));
    }
  }
  api::Status started = wanted.empty() ? api::Status::ok() : backend_.launch(wanted);
  if (!started) {
    spdlog::warn("launch of {} worker(s) failed: {}", ids.size(), started.message());
    stop_processes(ids);
    fail_batch(ids, "the backend could not start this launch: " + started.message());
    return;
  }
  // Asked outside the mutex (backend calls never run under it).
  std::vector<std::pair<std::string, std::string>> identities;
  identities.reserve(wanted.size());
  for (const auto& spec : wanted) identities.emplace_back(spec.worker_id, backend_.process_identity(spec.worker_id));
  Effects fx;
  {
    std::lock_guard<std::mutex> lock(mu_);
    const TimePoint now = clock_.now();
    for (const auto& [id, identity] : identities) {
      auto it = records_.find(id);
      if (it == records_.end()) continue;
      Record& r = it->second;
      r.launching = false;
      r.process = identity;
      mark_dirty(r);  // the identity goes to the store with the status
      if (api::is_terminal(r.worker.status)) {
        fx.to_stop.push_back(id);
        continue;
      }
      if (r.worker.status == WorkerStatus::kScheduling && !backend_.queues_workers()) {
        r.launched_at = now;  // the startup timeout counts from the start
        transition(r, WorkerStatus::kStarting, "", fx);
      }
    }
    for (const auto& id : ids) {
      if (auto it = records_.find(id); it != records_.end()) it->second.launching = false;
    }
    write_dirty_locked();
    settle_waiters(fx, false);
  }
  run(std::move(fx));
}

void WorkerRegistry::fail_batch(const std::vector<std::string>& ids, const std::string& reason) {
  Effects fx;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& id : ids) {
      auto it = records_.find(id);
      if (it == records_.end()) continue;
      it->second.launching = false;
      transition(it->second, WorkerStatus::kFailed, reason, fx);
    }
    write_dirty_locked();
    settle_waiters(fx, false);
  }
  run(std::move(fx));
}

}  // namespace muster::service
