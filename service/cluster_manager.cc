#include "service/cluster_manager.h"

#include <algorithm>
#include <fstream>

#include <spdlog/spdlog.h>

#include "api/base/atomic_file.h"
#include "clusterspec/launch_line.h"
#include "clusterspec/names.h"
#include "clusterspec/shell.h"
#include "clusterspec/spec_error.h"
#include "clusterspec/tf_config.h"
#include "service/auth.h"

namespace muster::service {

namespace fs = std::filesystem;
using api::WorkerStatus;
using nlohmann::json;

namespace {

// What a task runs when it has nothing else to do: wait to be stopped.
constexpr const char* kWaitCode = "import time\nwhile True:\n    time.sleep(3600)\n";

std::string seconds_text(double s) {
  std::string text = std::to_string(s);
  text.erase(text.find_last_not_of('0') + 1);
  if (!text.empty() && text.back() == '.') text.pop_back();
  return text;
}

// Why a task that ended (or never came up) ends its cluster.
std::string describe_end(const std::string& task, const api::Worker& w) {
  const std::string why = w.reason.empty() ? "" : ": " + w.reason;
  switch (w.status) {
    case WorkerStatus::kFailed:
      if (w.exit_code) return task + " failed with exit code " + std::to_string(*w.exit_code);
      return task + " failed" + why;
    case WorkerStatus::kTimedOut: return task + " timed out" + why;
    case WorkerStatus::kLost: return task + " was lost" + why;
    case WorkerStatus::kStopped: return task + " was stopped" + why;
    case WorkerStatus::kSucceeded: return task + " ended (exit code 0) while the cluster needed it";
    default: return task + " is " + api::worker_status_name(w.status);
  }
}

bool ready(const api::Worker& w, bool need_port) {
  return w.status == WorkerStatus::kRunning && w.ip_address != "unknown" && !w.ip_address.empty() &&
         (!need_port || w.port.has_value());
}

// The command every MPI rank runs for `script_path` (same rules as the agent's
// python3 kernel: .py with python3, .sh with bash, anything else directly).
std::vector<std::string> rank_command(const fs::path& script_path, const std::vector<std::string>& args) {
  std::vector<std::string> command;
  const std::string ext = script_path.extension().string();
  if (ext == ".py") {
    command = {"/usr/bin/python3", "-u", script_path.string()};  // the agent's python3 too (Debian's, with torch)
  } else if (ext == ".sh") {
    command = {"bash", script_path.string()};
  } else {
    command = {script_path.string()};
  }
  command.insert(command.end(), args.begin(), args.end());
  return command;
}

// The GPUs of an mpi cluster's ranks. mpirun maps ranks by slot over -H in
// order, so global rank g runs on a known host; every rank of a host gets
// the devices its workers reserved (in worker order) as
// CUDA_VISIBLE_DEVICES (so device `local_rank` is its own, Horovod's
// pinning), and MUSTER_GPU_DEVICE = the physical index of its local rank's
// device. Encoded for the wrapper: one entry per global rank, ';'-separated,
// each the host's comma-separated list. "" when no worker has a GPU.
std::string rank_gpus(const std::vector<clusterspec::HostSlots>& hosts, const std::vector<api::Worker>& workers) {
  bool any = false;
  std::vector<std::string> per_rank;
  for (const auto& h : hosts) {
    std::string list;
    for (const auto& w : workers) {
      if (w.ip_address != h.host || w.gpu_devices.empty()) continue;
      list += (list.empty() ? "" : ",") + w.gpu_devices;
      any = true;
    }
    per_rank.insert(per_rank.end(), static_cast<size_t>(h.slots), list);
  }
  if (!any) return "";
  std::string out;
  for (size_t i = 0; i < per_rank.size(); ++i) out += (i ? ";" : "") + per_rank[i];
  return out;
}

}  // namespace

// Run by /bin/sh in front of each rank's command when the cluster has GPUs.
const char* const kRankGpuWrapper =
    "h=$(printf %s \"$MUSTER_RANK_GPUS\" | cut -d \\; -f $((${OMPI_COMM_WORLD_RANK:-0} + 1))); "
    "d=$(printf %s \"$h\" | cut -d , -f $((${OMPI_COMM_WORLD_LOCAL_RANK:-0} + 1))); "
    "export CUDA_VISIBLE_DEVICES=\"$h\" NVIDIA_VISIBLE_DEVICES=\"$h\" MUSTER_GPU_DEVICE=\"$d\"; exec \"$@\"";


ClusterManager::ClusterManager(ClusterManagerOptions options, WorkerRegistry& registry, ClusterStore* store,
                               const Clock& clock, std::unique_ptr<Launcher> launcher)
    : options_(std::move(options)),
      registry_(registry),
      store_(store),
      clock_(clock),
      launcher_(launcher ? std::move(launcher) : make_process_launcher()) {
  subscription_ = registry_.subscribe([this](const api::Worker& w) {
    if (!w.cluster_id) return;
    std::lock_guard<std::mutex> lock(wake_mu_);
    wake_ = true;
    wake_cv_.notify_one();
  });
  if (options_.start_thread) thread_ = std::thread([this] { loop(); });
}

ClusterManager::~ClusterManager() {
  registry_.unsubscribe(subscription_);
  {
    std::lock_guard<std::mutex> lock(wake_mu_);
    quit_ = true;
    wake_cv_.notify_one();
  }
  if (thread_.joinable()) thread_.join();
  // Launchers still running end with the daemon (their LauncherProcess
  // destructors terminate the process groups).
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [id, e] : clusters_) {
    if (e.launcher) e.launcher->terminate(options_.launcher_grace);
  }
}

void ClusterManager::loop() {
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(wake_mu_);
      wake_cv_.wait_for(lock, options_.tick, [this] { return wake_ || quit_; });
      if (quit_) return;
      wake_ = false;
    }
    step();
  }
}

void ClusterManager::persist_locked(const Entry& e) {
  // Cluster changes follow events that already happened (a task ended, a
  // launcher started); a write that fails cannot undo them, so it is logged
  // loudly and the record is written again with the next change.
  if (store_) {
    if (auto s = store_->put(e.cluster.id, e.seq, e.cluster.to_record()); !s) {
      spdlog::error("cluster {}: {}", e.cluster.id, s.message());
    }
  }
  std::lock_guard<std::mutex> lock(listeners_mu_);
  for (const auto& [handle, l] : listeners_) l(e.cluster);
}

int ClusterManager::subscribe(Listener listener) {
  std::lock_guard<std::mutex> lock(listeners_mu_);
  listeners_[next_listener_] = std::move(listener);
  return next_listener_++;
}

void ClusterManager::unsubscribe(int handle) {
  std::lock_guard<std::mutex> lock(listeners_mu_);
  listeners_.erase(handle);
}

api::Status ClusterManager::restore() {
  if (!store_) return api::Status::ok();
  auto records = store_->load_all();
  if (!records) return records.status();
  std::vector<std::string> interrupted;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& record : records.value()) {
      auto cluster = Cluster::from_record(record);
      if (!cluster) continue;
      Entry e;
      e.cluster = std::move(cluster).value();
      e.seq = next_seq_++;
      e.launched = true;
      e.dir = options_.state_dir / "clusters" / e.cluster.id;
      if (!is_terminal(e.cluster.status)) interrupted.push_back(e.cluster.id);
      clusters_[e.cluster.id] = std::move(e);
    }
  }
  for (const auto& id : interrupted) {
    std::string was;
    std::optional<base::ProcessId> orphan;
    {
      std::lock_guard<std::mutex> lock(mu_);
      was = cluster_status_name(clusters_[id].cluster.status);
      orphan = clusters_[id].cluster.launcher_process;
    }
    // The earlier daemon's mpirun outlived it (kill -9 leaves children
    // running): end it and its ranks by identity before failing the cluster.
    std::string launcher_note;
    if (orphan) {
      const bool ended = launcher_->end_orphan(*orphan, options_.launcher_grace);
      launcher_note = ended ? "; its mpirun (pid " + std::to_string(orphan->pid) + ") and ranks were ended"
                            : "; its mpirun (pid " + std::to_string(orphan->pid) + ") had already ended";
      spdlog::info("cluster {}: launcher of the earlier daemon (pid {}) {}", id, orphan->pid,
                   ended ? "ended" : "already gone");
    }
    finish(id, ClusterStatus::kFailed,
           "the daemon restarted while the cluster was " + was + launcher_note + "; its tasks were stopped");
  }
  return api::Status::ok();
}

api::Result<Cluster> ClusterManager::create(const ClusterRequest& request) {
  const ValidationOptions& v = options_.validation;
  Entry e;
  e.cluster.request = request;
  e.cluster.created_at = format_time(clock_.now());
  {
    std::lock_guard<std::mutex> lock(mu_);
    do {
      e.cluster.id = "c-" + random_hex(4);
    } while (clusters_.count(e.cluster.id));
    e.seq = next_seq_++;
  }
  const std::string id = e.cluster.id;
  e.dir = options_.state_dir / "clusters" / id;

  // The rank command of mpi mode is the worker script itself.
  fs::path script_path;
  if (request.mode == ClusterMode::kMpi) {
    auto resolved = resolve_script(v.project_dir, request.worker_script);
    if (!resolved) return api::invalid_argument(resolved.status().message(), "worker_script");
    script_path = resolved.value();
  }

  // One launch batch per task type, built with the worker API's own
  // validation so scripts are checked exactly as for POST /workers.
  auto task_batch = [&](int n, const std::string& script, const std::vector<std::string>& args,
                        const char* field) -> api::Result<LaunchBatch> {
    json body{{"n", n}, {"cpu", request.cpu}, {"memory", request.memory}, {"nvidia_gpu", request.nvidia_gpu},
              {"env", request.env}};
    if (script.empty()) {
      body["code"] = kWaitCode;
    } else {
      body["script"] = script;
      body["args"] = args;
    }
    ValidationOptions batch_validation = v;
    batch_validation.max_workers = std::max(v.max_workers, n);
    auto parsed = parse_launch_request(body, batch_validation);
    if (!parsed) {
      const auto& s = parsed.status();
      return api::Status(s.code(), s.message(), s.field() == "script" ? field : s.field());
    }
    LaunchBatch batch;
    batch.request = std::move(parsed).value();
    batch.cluster_id = id;
    return batch;
  };

  std::vector<LaunchBatch> batches;      // in task order
  std::vector<std::string> batch_types;
  if (request.mode == ClusterMode::kPs) {
    if (request.n_ps > 0) {
      auto ps = task_batch(request.n_ps, request.ps_script, {}, "ps_script");
      if (!ps) return ps.status();
      ps->request.nvidia_gpu = 0;  // parameter servers keep variables in host memory: no GPU for them
      std::error_code ec;
      if (request.ps_script.empty() && !options_.ps_program.empty() && fs::is_regular_file(options_.ps_program, ec)) {
        // The runtime's parameter server, outside the project dir: built by
        // the daemon itself, so it skips the script validation.
        ps->request.code.clear();
        ps->request.kernel = api::kKernelExecutable;
        ps->request.script = options_.ps_program.filename().string();
        ps->request.script_path = options_.ps_program;
      }
      batches.push_back(std::move(ps).value());
      batch_types.push_back(clusterspec::kPs);
    }
    // TensorFlow 2's roles run the worker script too (each learns its role
    // from TF_CONFIG): the chief (coordinator) and the evaluator.
    const std::pair<int, const char*> roles[] = {{request.n_chief, clusterspec::kChief},
                                                 {request.n_workers, clusterspec::kWorker},
                                                 {request.n_evaluator, clusterspec::kEvaluator}};
    for (const auto& [n, type] : roles) {
      if (n == 0) continue;
      auto batch = task_batch(n, request.worker_script, request.args, "worker_script");
      if (!batch) return batch.status();
      batches.push_back(std::move(batch).value());
      batch_types.push_back(type);
    }
    for (auto& b : batches) {
      b.per_worker.assign(static_cast<size_t>(b.request.n), WorkerExtras{{}, true, true});
      for (auto& extras : b.per_worker) extras.env["MUSTER_CLUSTER_ID"] = id;
    }
  } else {
    auto idle = task_batch(request.n_workers, "", {}, "worker_script");
    if (!idle) return idle.status();
    idle->per_worker.assign(static_cast<size_t>(request.n_workers), WorkerExtras{});
    for (auto& extras : idle->per_worker) extras.env["MUSTER_CLUSTER_ID"] = id;
    batches.push_back(std::move(idle).value());
    batch_types.push_back(clusterspec::kWorker);
  }

  std::error_code ec;
  fs::create_directories(e.dir, ec);
  if (ec) return api::internal_error("cannot create the cluster directory " + e.dir.string() + ": " + ec.message());

  // Insert first (not yet launched) so that registry events for these
  // workers find their cluster; step() skips it until the tasks are known.
  {
    std::lock_guard<std::mutex> lock(mu_);
    clusters_[id] = std::move(e);
  }
  std::vector<ClusterTask> tasks;
  std::vector<std::string> launched_ids;
  for (size_t b = 0; b < batches.size(); ++b) {
    auto launched = registry_.launch(batches[b]);
    if (!launched) {
      if (!launched_ids.empty()) (void)registry_.stop(launched_ids);
      std::lock_guard<std::mutex> lock(mu_);
      clusters_.erase(id);
      return launched.status();
    }
    int index = 0;
    for (const auto& w : launched.value()) {
      tasks.push_back({batch_types[b], index++, w.id});
      launched_ids.push_back(w.id);
    }
  }

  Cluster out;
  {
    std::lock_guard<std::mutex> lock(mu_);
    Entry& placed = clusters_[id];
    placed.cluster.tasks = std::move(tasks);
    placed.launched = true;
    if (request.timeout_seconds > 0) {
      placed.deadline = clock_.now() + std::chrono::duration_cast<std::chrono::system_clock::duration>(
                                           std::chrono::duration<double>(request.timeout_seconds));
    }
    persist_locked(placed);
    out = placed.cluster;
  }
  {
    std::lock_guard<std::mutex> lock(wake_mu_);
    wake_ = true;
    wake_cv_.notify_one();
  }
  return out;
}

std::vector<Cluster> ClusterManager::list() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::pair<uint64_t, Cluster>> sorted;
  for (const auto& [id, e] : clusters_) {
    if (e.launched) sorted.emplace_back(e.seq, e.cluster);
  }
  std::sort(sorted.begin(), sorted.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<Cluster> out;
  for (auto& [seq, c] : sorted) out.push_back(std::move(c));
  return out;
}

api::Result<Cluster> ClusterManager::get(const std::string& id) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = clusters_.find(id);
  if (it == clusters_.end() || !it->second.launched) return api::not_found("no cluster '" + id + "'");
  return it->second.cluster;
}

api::Result<std::filesystem::path> ClusterManager::log_path(const std::string& id) const {
  std::string chief;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = clusters_.find(id);
    if (it == clusters_.end() || !it->second.launched) return api::not_found("no cluster '" + id + "'");
    const Cluster& c = it->second.cluster;
    if (c.request.mode == ClusterMode::kMpi) {
      if (!c.request.launch) return std::filesystem::path();
      return options_.state_dir / "clusters" / id / "launcher.log";
    }
    // TensorFlow's chief: the chief task, else worker 0.
    for (const auto& t : c.tasks) {
      if (t.type == clusterspec::kChief) chief = t.worker_id;
    }
    for (const auto& t : c.tasks) {
      if (chief.empty() && t.type == clusterspec::kWorker && t.index == 0) chief = t.worker_id;
    }
  }
  if (chief.empty()) return std::filesystem::path();
  // Outside mu_: registry calls never happen under the manager's mutex.
  auto path = registry_.log_path(chief);
  if (!path) return std::filesystem::path();
  return path.value();
}

api::Result<Cluster> ClusterManager::stop(const std::string& id) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = clusters_.find(id);
    if (it == clusters_.end() || !it->second.launched) return api::not_found("no cluster '" + id + "'");
  }
  finish(id, ClusterStatus::kStopped, "stopped by request");
  return get(id);
}

void ClusterManager::finish(const std::string& id, ClusterStatus status, const std::string& reason) {
  std::unique_ptr<LauncherProcess> launcher;
  std::vector<std::string> ids;
  {
    std::unique_lock<std::mutex> lock(mu_);
    auto it = clusters_.find(id);
    if (it == clusters_.end() || is_terminal(it->second.cluster.status)) return;
    if (it->second.ending) {
      ended_cv_.wait(lock, [&] { return is_terminal(clusters_[id].cluster.status); });
      return;
    }
    Entry& e = it->second;
    e.ending = true;
    launcher = std::move(e.launcher);
    for (const auto& t : e.cluster.tasks) ids.push_back(t.worker_id);
  }
  std::optional<int> launcher_code;
  if (launcher) {
    launcher->terminate(options_.launcher_grace);
    launcher_code = launcher->poll();
  }
  // Only tasks that are still alive; an empty list would mean "every worker".
  std::vector<std::string> alive;
  for (const auto& wid : ids) {
    auto w = registry_.get(wid);
    if (w && !api::is_terminal(w->status)) alive.push_back(wid);
  }
  if (!alive.empty()) (void)registry_.stop(alive);
  {
    std::lock_guard<std::mutex> lock(mu_);
    Entry& e = clusters_[id];
    e.cluster.status = status;
    e.cluster.reason = reason;
    e.cluster.finished_at = format_time(clock_.now());
    if (!e.cluster.launcher_exit_code) e.cluster.launcher_exit_code = launcher_code;
    e.cluster.launcher_process.reset();  // ended above (or by restore())
    persist_locked(e);
  }
  ended_cv_.notify_all();
  spdlog::info("cluster {} {}{}{}", id, cluster_status_name(status), reason.empty() ? "" : ": ", reason);
}

void ClusterManager::step() {
  std::vector<std::string> active;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [id, e] : clusters_) {
      if (e.launched && !e.ending && !is_terminal(e.cluster.status)) active.push_back(id);
    }
  }
  for (const auto& id : active) evaluate(id);
}

void ClusterManager::evaluate(const std::string& id) {
  Cluster c;
  TimePoint deadline;
  bool has_launcher = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = clusters_.find(id);
    if (it == clusters_.end() || it->second.ending || is_terminal(it->second.cluster.status)) return;
    c = it->second.cluster;
    deadline = it->second.deadline;
    has_launcher = it->second.launcher != nullptr;
  }
  const bool ps_mode = c.request.mode == ClusterMode::kPs;

  std::vector<api::Worker> workers;
  for (const auto& t : c.tasks) {
    auto w = registry_.get(t.worker_id);
    if (!w) return finish(id, ClusterStatus::kFailed, c.task_name(t) + " is gone: " + w.status().message());
    workers.push_back(w.value());
  }

  // d) Any task that ended badly ends the cluster. In ps mode a worker task
  // that succeeded is done, and a PS task that exits 0 is let be (the
  // workers decide); in mpi mode every worker must stay up.
  // Done (ps): with a chief, once the chief succeeded (TensorFlow 2's
  // workers and PS serve until told to stop); without one, once every
  // worker task succeeded. The rest (PS, evaluator) is then stopped.
  const bool has_chief = std::any_of(c.tasks.begin(), c.tasks.end(),
                                     [](const ClusterTask& t) { return t.type == clusterspec::kChief; });
  bool workers_done = true;
  for (size_t i = 0; i < c.tasks.size(); ++i) {
    const auto& t = c.tasks[i];
    const auto& w = workers[i];
    const bool ended = api::is_terminal(w.status);
    const bool ok_end = ps_mode && w.status == WorkerStatus::kSucceeded;
    if (ended && !ok_end) {
      std::string reason = describe_end(c.task_name(t), w);
      if (has_launcher) reason += "; mpirun was aborted";
      return finish(id, ClusterStatus::kFailed, reason);
    }
    const bool decides = has_chief ? t.type == clusterspec::kChief : t.type == clusterspec::kWorker;
    if (decides && w.status != WorkerStatus::kSucceeded) workers_done = false;
  }

  if (c.status == ClusterStatus::kStarting) {
    bool all_ready = true;
    size_t first_pending = 0;
    for (size_t i = 0; i < workers.size(); ++i) {
      if (!ready(workers[i], ps_mode)) {
        if (all_ready) first_pending = i;
        all_ready = false;
      }
    }
    if (!all_ready) {
      if (clock_.now() >= deadline) {
        finish(id, ClusterStatus::kFailed,
               c.task_name(c.tasks[first_pending]) + " did not register within " +
                   seconds_text(c.request.timeout_seconds) + " s (timeout_seconds)");
      }
      return;
    }
    api::Status s = ps_mode ? rendezvous_ps(id, workers) : rendezvous_mpi(id, workers);
    if (!s) finish(id, ClusterStatus::kFailed, s.message());
    return;
  }

  // c) Running.
  if (ps_mode) {
    if (workers_done) finish(id, ClusterStatus::kSucceeded, "");
    return;
  }
  if (!has_launcher) return;
  std::optional<int> code;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto& e = clusters_[id];
    if (e.launcher) code = e.launcher->poll();
    if (code) e.cluster.launcher_exit_code = code;
  }
  if (!code) return;
  if (*code == 0) {
    finish(id, ClusterStatus::kSucceeded, "");
  } else {
    finish(id, ClusterStatus::kFailed,
           "mpirun exited with code " + std::to_string(*code) + " (see " +
               (options_.state_dir / "clusters" / id / "launcher.log").string() + ")");
  }
}

api::Status ClusterManager::rendezvous_ps(const std::string& id, const std::vector<api::Worker>& workers) {
  Cluster c = get(id).value();
  clusterspec::ClusterSpec spec;
  try {
    // TensorFlow's rule: the evaluator is not part of the cluster.
    for (size_t i = 0; i < c.tasks.size(); ++i) {
      if (c.tasks[i].type == clusterspec::kEvaluator) continue;
      spec.add_task(c.tasks[i].type, clusterspec::format_address(workers[i].ip_address, *workers[i].port));
    }
    if (auto error = spec.validate()) return api::internal_error(*error);
  } catch (const clusterspec::SpecError& e) {
    return api::internal_error(std::string("cannot build the ClusterSpec: ") + e.what());
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto& e = clusters_[id];
    if (e.ending || is_terminal(e.cluster.status)) return api::Status::ok();
    e.cluster.cluster_spec = spec.to_json();
    e.cluster.status = ClusterStatus::kRunning;
    persist_locked(e);
  }
  spdlog::info("cluster {} running, releasing every task with ClusterSpec {}", id, spec.dump());
  // Every task gets its own TF_CONFIG and the cluster's secret (the ps tasks
  // serve only clients presenting it; it is never stored or shown); a release
  // that fails (the task ended meanwhile) shows up as that task's end on the
  // next pass.
  const std::string secret = random_hex(32);
  for (const auto& t : c.tasks) {
    clusterspec::TfConfig config;
    config.cluster = spec;
    config.task_type = t.type;
    config.task_index = t.index;
    Release release;
    release.env["TF_CONFIG"] = config.dump();
    release.env["MUSTER_CLUSTER_ID"] = id;
    release.env["MUSTER_TASK_TYPE"] = t.type;
    release.env["MUSTER_TASK_INDEX"] = std::to_string(t.index);
    release.env["MUSTER_PS_SECRET"] = secret;
    release.files["cluster.json"] = config.to_json().dump(2) + "\n";
    (void)registry_.release(t.worker_id, std::move(release));
  }
  return api::Status::ok();
}

api::Status ClusterManager::rendezvous_mpi(const std::string& id, const std::vector<api::Worker>& workers) {
  Cluster c = get(id).value();
  const ClusterRequest& r = c.request;
  // Workers on one IP share a host (the local backend: one host, all slots).
  std::vector<clusterspec::HostSlots> hosts;
  for (const auto& w : workers) {
    auto it = std::find_if(hosts.begin(), hosts.end(), [&](const auto& h) { return h.host == w.ip_address; });
    if (it == hosts.end()) {
      hosts.push_back({w.ip_address, r.slots});
    } else {
      it->slots += r.slots;
    }
  }
  auto script_path = resolve_script(options_.validation.project_dir, r.worker_script);
  if (!script_path) return api::invalid_argument("worker_script: " + script_path.status().message());

  clusterspec::HorovodrunOptions h;
  h.hosts = hosts;
  h.ssh_port = r.ssh_port;
  h.network_interfaces = r.network_interfaces;
  h.fusion_threshold_mb = r.fusion_threshold_mb;
  h.cycle_time_ms = r.cycle_time_ms;
  h.timeline_filename = r.timeline_filename;
  h.start_timeout_s = r.start_timeout;
  h.verbose = r.verbose;
  h.command = rank_command(script_path.value(), r.args);
  // Preflight (backends whose hosts are reached over ssh): every host is
  // checked before mpirun starts; the found interface and --prefix go on the line.
  std::vector<std::string> host_names;
  for (const auto& hs : hosts) host_names.push_back(hs.host);
  auto preflight = registry_.backend().preflight_mpi(host_names, r.ssh_port, h.command.front());
  if (!preflight) return api::Status(preflight.status().code(), "preflight failed: " + preflight.status().message());
  if (h.network_interfaces.empty() && !preflight.value().network_interface.empty()) {
    h.network_interfaces = {preflight.value().network_interface};
  }
  std::vector<std::string> horovodrun, mpirun;
  std::string hostfile;
  try {
    horovodrun = clusterspec::horovodrun_argv(h);
    clusterspec::MpirunOptions m = clusterspec::mpirun_options_for(h);
    m.program = options_.mpirun;
    m.prefix = preflight.value().prefix;
    for (const auto& [name, value] : r.env) m.forward_env.push_back(name);
    m.forward_env.push_back("MUSTER_CLUSTER_ID");
    m.extra_mpi_args = options_.mpirun_extra_args;
    if (auto gpus = rank_gpus(hosts, workers); !gpus.empty()) {
      // Each rank sees its host's reserved devices and is handed the one of
      // its local rank (see rank_gpus()).
      m.set_env["MUSTER_RANK_GPUS"] = gpus;
      m.command.insert(m.command.begin(), {"/bin/sh", "-c", kRankGpuWrapper, "muster-rank"});
    }
    // A backend that reaches its hosts otherwise than by ssh (Slurm: srun)
    // says how, for this launch only.
    if (!preflight.value().rsh_agent.empty()) {
      m.extra_mpi_args.insert(m.extra_mpi_args.end(), {"-mca", "plm_rsh_agent", preflight.value().rsh_agent});
    }
    mpirun = clusterspec::mpirun_argv(m);
    hostfile = clusterspec::write_hostfile(hosts);
  } catch (const clusterspec::SpecError& e) {
    return api::invalid_argument(std::string("cannot build the launch lines: ") + e.what());
  }
  const fs::path dir = options_.state_dir / "clusters" / id;
  if (auto err = base::write_file_atomically(dir / "hostfile", hostfile)) return api::internal_error(*err);

  std::unique_ptr<LauncherProcess> process;
  if (r.launch) {
    LauncherSpec spec;
    spec.argv = mpirun;
    spec.env = r.env;
    spec.env["MUSTER_CLUSTER_ID"] = id;
    // Rank 0 reports training metrics as the first worker (its metrics
    // token, never its agent's). The launched line forwards them with -x;
    // the shown line stays without (a user may run it by hand, where they
    // are not set). Open MPI refuses mca_base_env_list beside -x.
    if (auto token = registry_.metrics_token(workers.front().id); !token.empty()) {
      spec.env["MUSTER_URL"] = registry_.agent_url();
      spec.env["MUSTER_WORKER_ID"] = workers.front().id;
      spec.env["MUSTER_METRICS_TOKEN"] = token;
      const std::vector<std::string> forward = {"-x", "MUSTER_URL", "-x", "MUSTER_WORKER_ID", "-x",
                                                "MUSTER_METRICS_TOKEN"};
      spec.argv.insert(spec.argv.begin() + 1, forward.begin(), forward.end());
    }
    spec.working_dir = options_.validation.project_dir;
    spec.log_path = dir / "launcher.log";
    auto started = launcher_->start(spec);
    if (!started) return started.status();
    process = std::move(started).value();
  }
  std::lock_guard<std::mutex> lock(mu_);
  auto& e = clusters_[id];
  e.cluster.horovodrun_argv = horovodrun;
  e.cluster.mpirun_argv = mpirun;
  e.cluster.hostfile = hostfile;
  if (e.ending || is_terminal(e.cluster.status)) {
    // Stopped while we were starting mpirun: end it here.
    if (process) process->terminate(options_.launcher_grace);
    persist_locked(e);
    return api::Status::ok();
  }
  if (process && process->identity().valid()) e.cluster.launcher_process = process->identity();
  e.launcher = std::move(process);
  e.cluster.status = ClusterStatus::kRunning;
  persist_locked(e);
  spdlog::info("cluster {} running{}: {}", id, r.launch ? ", launched" : "", clusterspec::join_for_shell(mpirun));
  return api::Status::ok();
}

}  // namespace muster::service
