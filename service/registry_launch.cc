// WorkerRegistry::launch() and the backend step it queues (registry.h,
// "Launch"): the records are stored first, the backend is asked later, on a
// launch thread, and the batch stays all-or-nothing.
#include <spdlog/spdlog.h>

#include <system_error>

#include "api/agent_protocol.h"
#include "api/log_capture.h"
#include "service/auth.h"
#include "service/registry.h"

namespace muster::service {

namespace fs = std::filesystem;
using api::WorkerStatus;

// Step by step, under the mutex: a) a record per worker (status
// `scheduling`, its directory created, its agent's argv and environment from
// api/agent_protocol.h); b) the batch's GPUs, all or nothing; c) every record
// in one store transaction. Any failure removes the batch's records and
// returns the error. Then, outside the mutex: d) the backend step is queued
// (start_batch) and the workers are returned as they are at that moment.
api::Result<std::vector<api::Worker>> WorkerRegistry::launch(const LaunchBatch& batch) {
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
  const std::string master_ip = backend_.master_address();
  const std::string url = agent_url();
  // Where the script's Python finds muster (after the user's own PYTHONPATH).
  const std::map<std::string, std::string> muster_python = python_env(options_.worker_python, req.env);

  std::vector<workers::LaunchSpec> specs;
  std::vector<std::string> ids;
  Effects fx;
  {
    std::lock_guard<std::mutex> lock(mu_);
    const TimePoint now = clock_.now();
    for (int i = 0; i < req.n; ++i) {
      const WorkerExtras extras = batch.per_worker.empty() ? WorkerExtras{} : batch.per_worker[i];
      Record r;
      do {
        r.worker.id = random_hex(5);
      } while (records_.count(r.worker.id));
      r.seq = next_seq_++;
      r.worker.cpu = req.cpu;
      r.worker.memory = req.memory;
      r.worker.nvidia_gpu = req.nvidia_gpu;
      r.worker.kernel = req.kernel;
      r.worker.script = req.script;
      r.worker.cluster_id = batch.cluster_id;
      r.worker.created_at = format_time(now);
      r.agent_token = random_hex(32);
      r.hold = extras.hold;
      r.reserve_port = extras.reserve_port;
      r.launched_at = now;
      r.last_heartbeat = now;
      r.launching = true;
      const fs::path dir = options_.state_dir / "workers" / r.worker.id;
      std::error_code ec;
      fs::create_directories(dir, ec);
      if (ec) {
        forget(ids);
        return api::internal_error("cannot create the worker directory " + dir.string() + ": " + ec.message());
      }
      r.log_path = dir / "output.log";

      workers::LaunchSpec spec;
      spec.worker_id = r.worker.id;
      spec.cpu = req.cpu;
      spec.memory_gb = req.memory;
      spec.nvidia_gpu = req.nvidia_gpu;
      spec.agent_argv = api::to_argv(options_.agent_path.string(), command);
      spec.working_dir = dir;
      spec.log_path = r.log_path;
      spec.log_limits = options_.worker_log;
      spec.env = req.env;
      for (const auto& [k, v] : extras.env) spec.env[k] = v;
      for (const auto& [k, v] : muster_python) spec.env[k] = v;
      specs.push_back(std::move(spec));

      token_to_id_[r.agent_token] = r.worker.id;
      ids.push_back(r.worker.id);
      records_[r.worker.id] = std::move(r);
    }
    // GPUs, all or nothing for the batch.
    std::vector<GpuInventory::Request> wants;
    for (const auto& id : ids) wants.push_back({id, req.nvidia_gpu});
    auto devices = options_.gpus->reserve(wants);
    if (!devices) {
      forget(ids);
      return devices.status();
    }
    std::vector<StoredRecord> rows;
    deferred_ = &rows;
    for (size_t i = 0; i < ids.size(); ++i) {
      Record& placed = records_.at(ids[i]);
      if (!devices.value()[i].empty()) placed.worker.gpu_devices = device_list(devices.value()[i]);
      api::AgentEnvironment env;
      env.url = url;
      env.worker_id = placed.worker.id;
      env.token = placed.agent_token;
      env.master_ip = master_ip;
      env.heartbeat = options_.heartbeat_interval;
      env.reserve_port = placed.reserve_port;
      env.cpu = req.cpu;
      env.memory_gb = req.memory;
      if (options_.metrics_token) env.metrics_token = options_.metrics_token(placed.worker.id);
      env.project_dir = options_.project_dir.string();
      env.gpu_devices = placed.worker.gpu_devices;
      for (auto& [k, v] : api::to_env(env)) specs[i].env[k] = std::move(v);
      api::add_log_capture_env(specs[i].env, {placed.log_path.string(), options_.worker_log});
      (void)persist(placed);  // deferred: written below in one transaction
      fx.changed.push_back(placed.worker);
    }
    if (auto s = flush_deferred(rows); !s) {
      forget(ids);
      return s;
    }
  }
  run(std::move(fx));
  launches_.post([this, ids, specs = std::move(specs)]() mutable { start_batch(ids, std::move(specs)); });
  std::vector<api::Worker> out;
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& id : ids) {
    auto it = records_.find(id);
    if (it != records_.end()) out.push_back(it->second.worker);
  }
  return out;
}

// On a launch thread. Step by step: a) leave out the workers stopped since
// launch() (nothing to start); b) ask the backend to start the rest (it
// starts all or none); c) on failure, stop every worker of the batch (in case
// the backend left one running) and fail them all with its reason; on
// success, store each agent's process identity and move the workers that are
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
  for (const auto& spec : wanted) identities.emplace_back(spec.worker_id, backend_.process_identity(spec.worker_id));
  Effects fx;
  {
    std::lock_guard<std::mutex> lock(mu_);
    const TimePoint now = clock_.now();
    std::vector<StoredRecord> rows;
    deferred_ = &rows;
    for (const auto& [id, identity] : identities) {
      auto it = records_.find(id);
      if (it == records_.end()) continue;
      Record& r = it->second;
      r.launching = false;
      r.process = identity;
      if (api::is_terminal(r.worker.status)) {
        fx.to_stop.push_back(id);
        continue;
      }
      if (r.worker.status == WorkerStatus::kScheduling && !backend_.queues_workers()) {
        r.launched_at = now;  // the startup timeout counts from the start
        (void)transition(r, WorkerStatus::kStarting, "", fx);
      }
      (void)persist(r);  // deferred (replaces the transition's row): the identity goes with it
    }
    for (const auto& id : ids) {
      if (auto it = records_.find(id); it != records_.end()) it->second.launching = false;
    }
    if (auto s = flush_deferred(rows); !s) {
      spdlog::error("launch: the workers run, but their new state was not stored: {}", s.message());
    }
    settle_waiters(fx, false);
  }
  run(std::move(fx));
}

void WorkerRegistry::fail_batch(const std::vector<std::string>& ids, const std::string& reason) {
  Effects fx;
  {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<StoredRecord> rows;
    deferred_ = &rows;
    for (const auto& id : ids) {
      auto it = records_.find(id);
      if (it == records_.end()) continue;
      it->second.launching = false;
      (void)transition(it->second, WorkerStatus::kFailed, reason, fx);
    }
    if (auto s = flush_deferred(rows); !s) {
      // Memory says failed; a restarted daemon fails the `scheduling` records too.
      spdlog::error("launch: the failed workers' state was not stored: {}", s.message());
    }
    settle_waiters(fx, false);
  }
  run(std::move(fx));
}

}  // namespace muster::service
