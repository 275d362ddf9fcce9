#include "service/registry.h"

#include <algorithm>
#include <atomic>
#include <set>
#include <system_error>

#include <spdlog/spdlog.h>

#include "service/auth.h"

namespace muster::service {

namespace fs = std::filesystem;
using api::WorkerStatus;
using nlohmann::json;

struct WorkerRegistry::Record {
  api::Worker worker;
  uint64_t seq = 0;
  std::string agent_token;
  bool hold = false;
  bool reserve_port = false;
  std::optional<Release> release;
  TimePoint launched_at;     // startup timeout counts from here
  TimePoint last_heartbeat;  // heartbeat timeout counts from here
  fs::path log_path;
  std::string process;       // Backend::process_identity(), for a later daemon
};

struct WorkerRegistry::Waiter {
  api::AwaitRequest request;
  std::optional<TimePoint> deadline;
  AwaitCallback done;
};

struct WorkerRegistry::ReleaseWaiter {
  std::string id;
  TimePoint deadline;
  ReleaseCallback done;
};

namespace {

json release_to_json(const Release& r) { return {{"env", r.env}, {"files", r.files}}; }

std::string exit_reason(int code) {
  if (code > 128 && code < 160) {
    return "the script was killed by signal " + std::to_string(code - 128) + " (exit code " + std::to_string(code) +
           ")";
  }
  return "the script exited with code " + std::to_string(code);
}

}  // namespace

WorkerRegistry::WorkerRegistry(RegistryOptions options, workers::Backend& backend, Store* store, const Clock& clock)
    : options_(std::move(options)), backend_(backend), store_(store), clock_(clock) {
  if (!options_.gpus) options_.gpus = &no_gpus_;
  if (options_.async_stops) stopper_ = std::thread([this] { stopper_loop(); });
}

WorkerRegistry::~WorkerRegistry() {
  {
    std::lock_guard<std::mutex> lock(stop_mu_);
    stopping_ = true;
  }
  stop_cv_.notify_all();
  if (stopper_.joinable()) stopper_.join();
}

void WorkerRegistry::stopper_loop() {
  std::unique_lock<std::mutex> lock(stop_mu_);
  for (;;) {
    stop_cv_.wait(lock, [&] { return stopping_ || !stop_queue_.empty(); });
    if (stopping_) return;
    std::string id = std::move(stop_queue_.front());
    stop_queue_.pop_front();
    lock.unlock();
    (void)backend_.stop(id, options_.stop_grace);
    lock.lock();
  }
}

api::Status WorkerRegistry::persist(const Record& r) {
  if (!store_) return api::Status::ok();
  json rec = {{"worker", api::to_json(r.worker)},
              {"agent_token", r.agent_token},
              {"hold", r.hold},
              {"reserve_port", r.reserve_port},
              {"release", r.release ? release_to_json(*r.release) : json(nullptr)},
              {"log_path", r.log_path.string()},
              {"process", r.process}};
  if (deferred_) {
    // A later write of the same worker replaces the earlier one.
    for (auto& d : *deferred_) {
      if (d.id == r.worker.id) {
        d.record = std::move(rec);
        return api::Status::ok();
      }
    }
    deferred_->push_back(StoredRecord{r.worker.id, r.seq, std::move(rec)});
    return api::Status::ok();
  }
  return store_->put({StoredRecord{r.worker.id, r.seq, std::move(rec)}});
}

api::Status WorkerRegistry::transition(Record& r, WorkerStatus to, std::string reason, Effects& fx) {
  if (!api::can_transition(r.worker.status, to)) return api::Status::ok();
  const Record before = r;
  r.worker.status = to;
  r.worker.reason = std::move(reason);
  const std::string now = format_time(clock_.now());
  if (to == WorkerStatus::kRunning) r.worker.started_at = r.worker.running_at = now;
  if (api::is_terminal(to)) r.worker.finished_at = now;
  if (auto s = persist(r); !s) {
    r = before;  // nothing half-written: memory stays what the store holds
    return s;
  }
  // Its devices go back now (the process tree is being stopped or is gone).
  if (api::is_terminal(to) && !r.worker.gpu_devices.empty()) options_.gpus->release(r.worker.id);
  fx.changed.push_back(r.worker);
  return api::Status::ok();
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
  if (!fx.to_stop.empty()) {
    if (options_.async_stops) {
      {
        std::lock_guard<std::mutex> lock(stop_mu_);
        for (auto& id : fx.to_stop) stop_queue_.push_back(std::move(id));
      }
      stop_cv_.notify_all();
    } else {
      for (const auto& id : fx.to_stop) (void)backend_.stop(id, options_.stop_grace);
    }
  }
}

// Step by step, for each waiter: a worker settles as a success (running with
// an IP, or succeeded when waiting for completion) or a failure (any other
// terminal status); when every worker settled, or the deadline passed (then
// the pending ones fail with "await timed out"), the waiter's callback is
// queued with both lists in request order and the waiter is dropped.
void WorkerRegistry::settle_waiters(Effects& fx, bool at_tick) {
  const TimePoint now = clock_.now();
  for (auto it = waiters_.begin(); it != waiters_.end();) {
    const Waiter& w = **it;
    const bool expired = at_tick && w.deadline && now >= *w.deadline;
    AwaitResult result;
    bool pending = false;
    for (const auto& id : w.request.ids) {
      auto rec = records_.find(id);
      if (rec == records_.end()) {
        api::Worker gone;
        gone.id = id;
        gone.status = WorkerStatus::kFailed;
        gone.reason = "the worker no longer exists";
        result.failures.push_back(gone);
        continue;
      }
      const api::Worker& worker = rec->second.worker;
      const bool ok = w.request.wait_for_completion
                          ? worker.status == WorkerStatus::kSucceeded
                          : worker.status == WorkerStatus::kRunning && worker.ip_address != "unknown";
      if (ok) {
        result.workers.push_back(worker);
      } else if (api::is_terminal(worker.status)) {
        result.failures.push_back(worker);
      } else if (expired) {
        api::Worker late = worker;
        late.reason = "await timed out";
        result.failures.push_back(late);
      } else {
        pending = true;
      }
    }
    if (pending) {
      ++it;
      continue;
    }
    fx.callbacks.push_back([done = w.done, result = std::move(result)]() mutable { done(std::move(result)); });
    it = waiters_.erase(it);
  }
}

api::Status WorkerRegistry::restore() {
  if (!store_) return api::Status::ok();
  auto rows = store_->load_all();
  if (!rows) return rows.status();
  Effects fx;
  std::vector<std::pair<std::string, std::string>> adopt;  // id, process identity
  std::unique_lock<std::mutex> lock(mu_);
  const TimePoint now = clock_.now();
  for (auto& row : rows.value()) {
    const json& j = row.record;
    if (!j.is_object() || !j.contains("worker")) continue;
    auto worker = api::worker_from_json(j["worker"]);
    if (!worker) continue;
    Record r;
    r.worker = std::move(worker).value();
    r.seq = row.seq;
    r.agent_token = j.value("agent_token", "");
    r.hold = j.value("hold", false);
    r.reserve_port = j.value("reserve_port", false);
    if (j.contains("release") && j["release"].is_object()) {
      Release rel;
      rel.env = j["release"].value("env", std::map<std::string, std::string>{});
      rel.files = j["release"].value("files", std::map<std::string, std::string>{});
      r.release = std::move(rel);
    }
    r.log_path = j.value("log_path", "");
    if (!api::is_terminal(r.worker.status) && !r.worker.gpu_devices.empty()) {
      options_.gpus->adopt(r.worker.id, parse_device_list(r.worker.gpu_devices));
    }
    r.process = j.value("process", "");
    r.launched_at = now;
    r.last_heartbeat = now;
    next_seq_ = std::max(next_seq_, r.seq + 1);
    if (!r.agent_token.empty()) token_to_id_[r.agent_token] = r.worker.id;
    auto& placed = records_[r.worker.id] = std::move(r);
    if (placed.worker.status == WorkerStatus::kScheduling && !backend_.queues_workers()) {
      (void)transition(placed, WorkerStatus::kFailed, "the daemon restarted before the worker was launched", fx);
    }
    if (!api::is_terminal(placed.worker.status) && !placed.process.empty()) {
      adopt.emplace_back(placed.worker.id, placed.process);
    }
  }
  lock.unlock();
  // The earlier daemon's agents, so that poll() and stop() reach them again
  // (backend calls never run under the registry's mutex).
  for (const auto& [id, process] : adopt) backend_.adopt(id, process);
  // No listeners or waiters exist yet; nothing to run.
  return api::Status::ok();
}

api::Result<std::vector<api::Worker>> WorkerRegistry::launch(const LaunchBatch& batch) {
  const api::LaunchRequest& req = batch.request;
  if (!batch.per_worker.empty() && batch.per_worker.size() != static_cast<size_t>(req.n)) {
    return api::invalid_argument("per-worker options must be given for all " + std::to_string(req.n) + " workers");
  }
  std::vector<workers::LaunchSpec> specs;
  std::vector<api::Worker> launched;
  std::vector<std::string> ids;
  Effects fx;
  {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<StoredRecord> batch_rows;
    deferred_ = &batch_rows;
    struct Undefer {
      std::vector<StoredRecord>*& d;
      ~Undefer() { d = nullptr; }
    } undefer{deferred_};
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
      const fs::path dir = options_.state_dir / "workers" / r.worker.id;
      std::error_code ec;
      fs::create_directories(dir, ec);
      if (ec) {
        for (const auto& done : ids) {
          token_to_id_.erase(records_.at(done).agent_token);
          records_.erase(done);
        }
        return api::internal_error("cannot create the worker directory " + dir.string() + ": " + ec.message());
      }
      r.log_path = dir / "output.log";

      workers::LaunchSpec spec;
      spec.worker_id = r.worker.id;
      spec.cpu = req.cpu;
      spec.memory_gb = req.memory;
      spec.nvidia_gpu = req.nvidia_gpu;
      spec.agent_argv = {options_.agent_path.string(), "--kernel", req.kernel};
      if (!req.code.empty()) {
        spec.agent_argv.insert(spec.agent_argv.end(), {"--code", req.code});
      } else {
        spec.agent_argv.insert(spec.agent_argv.end(), {"--script", req.script_path.string()});
      }
      spec.agent_argv.push_back("--");
      spec.agent_argv.insert(spec.agent_argv.end(), req.args.begin(), req.args.end());
      spec.env = req.env;
      for (const auto& [k, v] : extras.env) spec.env[k] = v;
      spec.env["MUSTER_URL"] = options_.agent_url;
      spec.env["MUSTER_WORKER_ID"] = r.worker.id;
      spec.env["MUSTER_AGENT_TOKEN"] = r.agent_token;
      if (options_.metrics_token) spec.env["MUSTER_METRICS_TOKEN"] = options_.metrics_token(r.worker.id);
      spec.env["MUSTER_MASTER_IP"] = options_.master_ip;
      spec.env["MUSTER_PROJECT_DIR"] = options_.project_dir.string();
      spec.env["MUSTER_HEARTBEAT_S"] =
          std::to_string(std::chrono::duration<double>(options_.heartbeat_interval).count());
      spec.env["MUSTER_CPU"] = std::to_string(req.cpu);
      spec.env["MUSTER_MEMORY_GB"] = std::to_string(req.memory);
      // cdsw's engine variables that mean something here (the agent adds
      // CDSW_IP_ADDRESS once it knows its address).
      spec.env["CDSW_ENGINE_ID"] = r.worker.id;
      spec.env["CDSW_MASTER_IP"] = options_.master_ip;
      spec.env["CML_MASTER_IP"] = options_.master_ip;
      spec.env["CDSW_PROJECT"] = options_.project_dir.filename().string();
      spec.env["CDSW_CPU_MILLICORES"] = std::to_string(static_cast<long>(req.cpu * 1000 + 0.5));
      spec.env["CDSW_MEMORY_MB"] = std::to_string(static_cast<long>(req.memory * 1024 + 0.5));
      if (extras.reserve_port) spec.env["MUSTER_RESERVE_PORT"] = "1";
      spec.working_dir = dir;
      spec.log_path = r.log_path;
      specs.push_back(std::move(spec));

      token_to_id_[r.agent_token] = r.worker.id;
      ids.push_back(r.worker.id);
      auto& placed = records_[r.worker.id] = std::move(r);
      (void)persist(placed);  // deferred: written below in one transaction
      fx.changed.push_back(placed.worker);
      // A queueing backend's workers stay `scheduling` until the scheduler
      // starts them (tick() sees it through poll()).
      if (!backend_.queues_workers()) (void)transition(placed, WorkerStatus::kStarting, "", fx);
      launched.push_back(placed.worker);
    }
    // GPUs, all or nothing for the batch.
    std::vector<GpuInventory::Request> wants;
    for (const auto& id : ids) wants.push_back({id, req.nvidia_gpu});
    auto devices = options_.gpus->reserve(wants);
    if (!devices) {
      for (const auto& id : ids) {
        token_to_id_.erase(records_.at(id).agent_token);
        records_.erase(id);
      }
      return devices.status();
    }
    for (size_t i = 0; i < ids.size(); ++i) {
      if (devices.value()[i].empty()) continue;
      const std::string list = device_list(devices.value()[i]);
      Record& placed = records_.at(ids[i]);
      placed.worker.gpu_devices = list;
      launched[i].gpu_devices = list;
      specs[i].env["CUDA_VISIBLE_DEVICES"] = list;
      specs[i].env["NVIDIA_VISIBLE_DEVICES"] = list;
      specs[i].env["MUSTER_GPU_DEVICES"] = list;
      (void)persist(placed);  // deferred: written below in one transaction
    }
    for (auto& w : fx.changed) w.gpu_devices = records_.at(w.id).worker.gpu_devices;
    if (store_) {
      if (auto s = store_->put(batch_rows); !s) {
        for (const auto& id : ids) {
          options_.gpus->release(id);
          token_to_id_.erase(records_.at(id).agent_token);
          records_.erase(id);
        }
        return s;
      }
    }
  }
  api::Status started = backend_.launch(specs);
  if (!started) {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& id : ids) {
      auto it = records_.find(id);
      if (it == records_.end()) continue;
      options_.gpus->release(id);
      token_to_id_.erase(it->second.agent_token);
      records_.erase(it);
    }
    if (store_) (void)store_->remove(ids);
    return started;
  }
  // Each agent's identity goes into its record, so that a restarted daemon
  // can still reach (and stop) it. Asked outside the mutex.
  std::vector<std::pair<std::string, std::string>> identities;
  for (const auto& id : ids) identities.emplace_back(id, backend_.process_identity(id));
  {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<StoredRecord> rows;
    deferred_ = &rows;
    for (const auto& [id, identity] : identities) {
      auto it = records_.find(id);
      if (it == records_.end() || identity.empty()) continue;
      it->second.process = identity;
      (void)persist(it->second);
    }
    deferred_ = nullptr;
    if (store_ && !rows.empty()) {
      if (auto s = store_->put(rows); !s) {
        spdlog::error("launch: the workers run, but their process identities were not stored: {}", s.message());
      }
    }
  }
  run(std::move(fx));
  return launched;
}

std::vector<api::Worker> WorkerRegistry::list() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<const Record*> ordered;
  for (const auto& [id, r] : records_) ordered.push_back(&r);
  std::sort(ordered.begin(), ordered.end(), [](const Record* a, const Record* b) { return a->seq < b->seq; });
  std::vector<api::Worker> out;
  for (const Record* r : ordered) out.push_back(r->worker);
  return out;
}

api::Result<api::Worker> WorkerRegistry::get(const std::string& id) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = records_.find(id);
  if (it == records_.end()) return api::not_found("no worker '" + id + "'");
  return it->second.worker;
}

api::Result<fs::path> WorkerRegistry::log_path(const std::string& id) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = records_.find(id);
  if (it == records_.end()) return api::not_found("no worker '" + id + "'");
  return it->second.log_path;
}

api::Status WorkerRegistry::await_workers(const api::AwaitRequest& request, AwaitCallback done) {
  Effects fx;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& id : request.ids) {
      if (!records_.count(id)) return api::not_found("no worker '" + id + "'");
    }
    auto waiter = std::make_shared<Waiter>();
    waiter->request = request;
    if (request.timeout_seconds > 0) {
      waiter->deadline = clock_.now() + std::chrono::duration_cast<std::chrono::system_clock::duration>(
                                            std::chrono::duration<double>(request.timeout_seconds));
    }
    waiter->done = std::move(done);
    waiters_.push_back(std::move(waiter));
    settle_waiters(fx, /*at_tick=*/false);
  }
  run(std::move(fx));
  return api::Status::ok();
}

api::Result<std::vector<api::Worker>> WorkerRegistry::stop(const std::vector<std::string>& ids) {
  std::vector<std::string> targets;
  Effects fx;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (ids.empty()) {
      for (const auto& [id, r] : records_) {
        if (!api::is_terminal(r.worker.status)) targets.push_back(id);
      }
    } else {
      std::set<std::string> seen;  // a list may name a worker many times
      for (const auto& id : ids) {
        if (!records_.count(id)) return api::not_found("no worker '" + id + "'");
        if (seen.insert(id).second) targets.push_back(id);
      }
    }
    // Every transition in one transaction; if it fails, nothing changed.
    std::map<std::string, Record> before;
    std::vector<StoredRecord> rows;
    deferred_ = &rows;
    for (const auto& id : targets) {
      before.emplace(id, records_.at(id));
      (void)transition(records_.at(id), WorkerStatus::kStopped, "stopped through the API", fx);
    }
    deferred_ = nullptr;
    if (store_ && !rows.empty()) {
      if (auto s = store_->put(rows); !s) {
        for (auto& [id, r] : before) records_[id] = std::move(r);
        return s;
      }
    }
    settle_waiters(fx, false);
  }
  stop_processes(targets);
  run(std::move(fx));
  std::vector<api::Worker> out;
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& id : targets) {
    auto it = records_.find(id);
    if (it != records_.end()) out.push_back(it->second.worker);
  }
  return out;
}

// Stops the process trees in parallel (each may take up to the grace
// period), on at most kStopThreads threads however many workers there are.
void WorkerRegistry::stop_processes(const std::vector<std::string>& ids) {
  constexpr size_t kStopThreads = 8;
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t i = next++; i < ids.size(); i = next++) (void)backend_.stop(ids[i], options_.stop_grace);
  };
  std::vector<std::thread> threads;
  for (size_t t = 1; t < std::min(kStopThreads, ids.size()); ++t) threads.emplace_back(work);
  work();
  for (auto& t : threads) t.join();
}

api::Result<bool> WorkerRegistry::agent_register(const std::string& id, const std::string& ip,
                                                 std::optional<int> port) {
  Effects fx;
  bool hold = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = records_.find(id);
    if (it == records_.end()) return api::not_found("no worker '" + id + "'");
    Record& r = it->second;
    if (api::is_terminal(r.worker.status)) {
      return api::conflict("worker " + id + " is " + api::worker_status_name(r.worker.status) +
                           "; the agent must exit");
    }
    const Record before = r;
    r.worker.ip_address = ip;
    r.worker.port = port;
    r.last_heartbeat = clock_.now();
    api::Status stored = api::Status::ok();
    if (r.worker.status == WorkerStatus::kRunning) {
      stored = persist(r);  // re-registration (e.g. after a daemon restart)
      if (stored) fx.changed.push_back(r.worker);
    } else {
      // A queued worker's agent can call in before the backend's poll has
      // seen its job start: it has started all the same.
      if (r.worker.status == WorkerStatus::kScheduling) (void)transition(r, WorkerStatus::kStarting, "", fx);
      stored = transition(r, WorkerStatus::kRunning, r.hold ? "waiting for release" : "", fx);
    }
    if (!stored) {
      r = before;
      return stored;
    }
    hold = r.hold && !r.release;
    settle_waiters(fx, false);
  }
  run(std::move(fx));
  return hold;
}

api::Status WorkerRegistry::agent_heartbeat(const std::string& id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = records_.find(id);
  if (it == records_.end()) return api::not_found("no worker '" + id + "'");
  Record& r = it->second;
  if (api::is_terminal(r.worker.status)) {
    return api::conflict("worker " + id + " is " + api::worker_status_name(r.worker.status) +
                         "; the agent must stop its script and exit");
  }
  const auto now = clock_.now();
  if (options_.on_heartbeat_gap) options_.on_heartbeat_gap(std::chrono::duration<double>(now - r.last_heartbeat).count());
  r.last_heartbeat = now;
  return api::Status::ok();
}

api::Status WorkerRegistry::agent_exit(const std::string& id, int exit_code) {
  Effects fx;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = records_.find(id);
    if (it == records_.end()) return api::not_found("no worker '" + id + "'");
    Record& r = it->second;
    if (api::is_terminal(r.worker.status)) {
      return api::conflict("worker " + id + " is already " + api::worker_status_name(r.worker.status));
    }
    const Record before = r;
    r.worker.exit_code = exit_code;
    const api::Status stored = exit_code == 0 && r.worker.status == WorkerStatus::kRunning
                                   ? transition(r, WorkerStatus::kSucceeded, "", fx)
                                   : transition(r, WorkerStatus::kFailed, exit_reason(exit_code), fx);
    if (!stored) {
      r = before;
      return stored;
    }
    settle_waiters(fx, false);
  }
  run(std::move(fx));
  return api::Status::ok();
}

api::Status WorkerRegistry::agent_wait_release(const std::string& id, ReleaseCallback done) {
  std::optional<Release> ready;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = records_.find(id);
    if (it == records_.end()) return api::not_found("no worker '" + id + "'");
    Record& r = it->second;
    if (api::is_terminal(r.worker.status)) {
      return api::conflict("worker " + id + " is " + api::worker_status_name(r.worker.status));
    }
    if (!r.hold) return api::conflict("worker " + id + " is not held; it needs no release");
    r.last_heartbeat = clock_.now();  // a waiting agent is alive
    if (!r.release) {
      release_waiters_.push_back({id, clock_.now() + options_.release_poll, std::move(done)});
      return api::Status::ok();
    }
    ready = r.release;
  }
  done(std::move(ready));
  return api::Status::ok();
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

std::optional<std::string> WorkerRegistry::worker_for_agent_token(const std::string& token) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = token_to_id_.find(token);
  if (it == token_to_id_.end()) return std::nullopt;
  return it->second;
}

api::Status WorkerRegistry::release(const std::string& id, Release release) {
  for (const auto& [name, content] : release.files) {
    if (name.empty() || name.find('/') != std::string::npos || name == "." || name == "..") {
      return api::invalid_argument("release file name '" + name + "' must be a plain file name", "files");
    }
  }
  Effects fx;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = records_.find(id);
    if (it == records_.end()) return api::not_found("no worker '" + id + "'");
    Record& r = it->second;
    if (!r.hold) return api::conflict("worker " + id + " is not held");
    if (api::is_terminal(r.worker.status)) {
      return api::conflict("worker " + id + " is " + api::worker_status_name(r.worker.status));
    }
    const Record before = r;
    r.release = std::move(release);
    if (r.worker.reason == "waiting for release") r.worker.reason = "";
    if (auto s = persist(r); !s) {
      r = before;
      return s;
    }
    fx.changed.push_back(r.worker);
    for (auto w = release_waiters_.begin(); w != release_waiters_.end();) {
      if (w->id == id) {
        fx.callbacks.push_back([done = std::move(w->done), rel = *r.release]() mutable { done(std::move(rel)); });
        w = release_waiters_.erase(w);
      } else {
        ++w;
      }
    }
  }
  run(std::move(fx));
  return api::Status::ok();
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

size_t WorkerRegistry::pending_awaits() const {
  std::lock_guard<std::mutex> lock(mu_);
  return waiters_.size();
}

void WorkerRegistry::tick_queued(Record& r, const workers::ProcessStatus& process, TimePoint now, Effects& fx) {
  switch (process.state) {
    case workers::ProcessState::kPending:
      if (process.reason != r.worker.reason) {
        const std::string before = r.worker.reason;
        r.worker.reason = process.reason;
        if (persist(r)) {
          fx.changed.push_back(r.worker);
        } else {
          r.worker.reason = before;
        }
      }
      return;
    case workers::ProcessState::kRunning:
      // The startup timeout counts from here, not from the submission.
      r.launched_at = now;
      (void)transition(r, WorkerStatus::kStarting, "", fx);
      return;
    case workers::ProcessState::kExited:
    case workers::ProcessState::kLost:
      r.worker.exit_code = process.exit_code;
      // (A worker that never ran cannot be lost: a node failure before the
      // start fails it.)
      (void)transition(r,
                       process.outcome == WorkerStatus::kLost ? WorkerStatus::kFailed
                                                              : process.outcome.value_or(WorkerStatus::kFailed),
                       process.reason.empty() ? "the scheduler ended the job before it started" : process.reason, fx);
      return;
    case workers::ProcessState::kUnknown:
      // launch() records workers before it submits them; only a worker that
      // stays unknown past the startup timeout was never submitted (the
      // daemon died in between).
      if (now - r.launched_at > options_.startup_timeout) {
        (void)transition(r, WorkerStatus::kFailed,
                         "the scheduler has no job for this worker (the daemon restarted while launching it)", fx);
      }
      return;
  }
}

// Step by step: a) under the mutex, pick the workers whose process to ask
// about; b) without it, poll the backend for each (a backend may take
// seconds: the container backend tears namespaces down there); c) under the
// mutex again, apply what was seen and the timeouts to the workers that are
// still in the state they were in at a), and settle the long-polls. A
// queueing backend's `scheduling` workers are watched too (tick_queued()).
void WorkerRegistry::tick() {
  std::vector<std::pair<std::string, WorkerStatus>> watched;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [id, r] : records_) {
      const WorkerStatus s = r.worker.status;
      if (api::is_terminal(s)) continue;
      if (s != WorkerStatus::kScheduling || backend_.queues_workers()) watched.emplace_back(id, s);
    }
  }
  std::vector<workers::ProcessStatus> seen;
  seen.reserve(watched.size());
  for (const auto& [id, s] : watched) seen.push_back(backend_.poll(id));

  Effects fx;
  {
    std::lock_guard<std::mutex> lock(mu_);
    const TimePoint now = clock_.now();
    for (size_t i = 0; i < watched.size(); ++i) {
      const auto& [id, was] = watched[i];
      auto it = records_.find(id);
      if (it == records_.end() || it->second.worker.status != was) continue;  // changed meanwhile
      Record& r = it->second;
      const WorkerStatus s = r.worker.status;
      const workers::ProcessStatus& process = seen[i];
      if (s == WorkerStatus::kScheduling) {
        tick_queued(r, process, now, fx);
        continue;
      }
      if (process.state == workers::ProcessState::kExited && process.outcome) {
        r.worker.exit_code = process.exit_code;
        (void)transition(r, *process.outcome, process.reason, fx);
      } else if (process.state == workers::ProcessState::kExited) {
        // The agent reports the script's exit before it exits itself, so
        // an agent that is gone while the worker is not finished died.
        r.worker.exit_code = process.exit_code;
        (void)transition(r, WorkerStatus::kFailed,
                         "the agent exited (code " + std::to_string(process.exit_code.value_or(-1)) +
                             ") without reporting the script's exit; see the worker's log",
                         fx);
      } else if (s == WorkerStatus::kStarting && now - r.launched_at > options_.startup_timeout) {
        (void)transition(r, WorkerStatus::kTimedOut,
                         "the agent did not register within the startup timeout (" +
                             std::to_string(options_.startup_timeout.count() / 1000.0) + " s); see the worker's log",
                         fx);
        fx.to_stop.push_back(id);
      } else if (s == WorkerStatus::kRunning && now - r.last_heartbeat > options_.heartbeat_timeout) {
        (void)transition(r, WorkerStatus::kLost,
                         "no heartbeat from the agent for " +
                             std::to_string(options_.heartbeat_timeout.count() / 1000.0) + " s",
                         fx);
        fx.to_stop.push_back(id);
      } else if (process.state == workers::ProcessState::kLost) {
        (void)transition(r, WorkerStatus::kLost,
                         process.reason.empty() ? "the backend lost the worker" : process.reason, fx);
      }
    }
    for (auto w = release_waiters_.begin(); w != release_waiters_.end();) {
      auto rec = records_.find(w->id);
      const bool gone = rec == records_.end() || api::is_terminal(rec->second.worker.status);
      if (gone || now >= w->deadline) {
        fx.callbacks.push_back([done = std::move(w->done)] { done(std::nullopt); });
        w = release_waiters_.erase(w);
      } else {
        ++w;
      }
    }
    settle_waiters(fx, /*at_tick=*/true);
  }
  run(std::move(fx));
}

}  // namespace muster::service
