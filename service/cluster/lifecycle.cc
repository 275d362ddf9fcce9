// ClusterManager, the life of a cluster after create(): the manager
// thread's pass (step, evaluate: steps a) to d) of manager.h), the
// wiring, the one way a cluster ends (finish) and what a restarted
// daemon does with the clusters of the earlier one (restore). Why failed
// tasks end a cluster is failed_tasks.h's.
#include <algorithm>
#include <optional>

#include <spdlog/spdlog.h>

#include "service/cluster/failed_tasks.h"
#include "service/cluster/manager.h"

namespace muster::service {

namespace {

// What a cluster's tasks say once it ended: "cluster c-1a2b succeeded".
std::string task_reason(const std::string& id, api::ClusterStatus status, const std::string& reason) {
  switch (status) {
    case api::ClusterStatus::kSucceeded: return "cluster " + id + " succeeded";
    case api::ClusterStatus::kStopped: return "cluster " + id + " was stopped" + (reason.empty() ? "" : ": " + reason);
    default: return "cluster " + id + " failed" + (reason.empty() ? "" : ": " + reason);
  }
}

}  // namespace

api::Status ClusterManager::restore() {
  if (!store_) return api::Status::ok();
  std::vector<std::string> skipped;
  auto records = store_->load_all(&skipped);
  if (!records) return records.status();
  std::vector<std::string> interrupted;
  std::vector<api::Cluster> resumable;
  {
    std::lock_guard<std::mutex> lock(mu_);
    const TimePoint now = clock_.now();
    const WallTime wall = clock_.wall();
    for (const auto& record : records.value()) {
      auto cluster = api::Cluster::from_record(record);
      if (!cluster) {
        const bool named = record.contains("id") && record["id"].is_string();
        skipped.push_back((named ? record["id"].get<std::string>() : std::string("(no id)")) + ": " +
                          cluster.status().message());
        continue;
      }
      Entry e;
      e.cluster = std::move(cluster).value();
      e.seq = next_seq_++;
      e.launched = true;
      e.wired = e.cluster.status == api::ClusterStatus::kRunning;
      e.dir = options_.state_dir / "clusters" / e.cluster.id;
      // A finished cluster's age so far by the calendar, then on our clock.
      auto ended = e.cluster.finished_at ? api::parse_rfc3339(*e.cluster.finished_at) : std::nullopt;
      e.finished = now - std::chrono::duration_cast<TimePoint::duration>(
                             ended && *ended < wall ? wall - *ended : WallTime::duration::zero());
      if (!is_terminal(e.cluster.status)) resumable.push_back(e.cluster);
      clusters_[e.cluster.id] = std::move(e);
    }
  }
  for (const auto& s : skipped) spdlog::error("state database: skipped a cluster row that cannot be read: {}", s);
  // A mode may take its running clusters back (elastic: the agents return);
  // the rest were interrupted.
  for (auto& c : resumable) {
    if (mode_of(c.request).resume(c)) {
      // Its job (mpirun under muster-launcher) outlived the earlier daemon:
      // taken back by identity, its exit file says how it ends.
      if (c.launcher_process) {
        auto kept = launcher_->adopt(*c.launcher_process, options_.state_dir / "clusters" / c.id / "launcher.exit");
        if (!kept) {
          interrupted.push_back(c.id);
          continue;
        }
        std::lock_guard<std::mutex> lock(mu_);
        clusters_[c.id].launcher = std::move(kept);
      }
      spdlog::info("cluster {}: taken back at generation {} after the daemon restarted", c.id,
                   c.generations.empty() ? 0 : c.generations.back().generation);
      continue;
    }
    interrupted.push_back(c.id);
  }
  for (const auto& id : interrupted) {
    std::string was;
    std::optional<base::ProcessId> orphan;
    {
      std::lock_guard<std::mutex> lock(mu_);
      was = api::cluster_status_name(clusters_[id].cluster.status);
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
    finish(id, api::ClusterStatus::kFailed,
           "the daemon restarted while the cluster was " + was + launcher_note + "; its tasks were stopped");
  }
  return api::Status::ok();
}

void ClusterManager::finish(const std::string& id, api::ClusterStatus status, const std::string& reason,
                            std::optional<api::RankFailure> failed_rank) {
  std::unique_ptr<LauncherProcess> launcher;
  std::vector<std::string> ids;
  api::Cluster ended;
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
    const auto& borrowed = e.cluster.request.workers;  // the notebook's own workers: never stopped here
    for (const auto& t : e.cluster.tasks) {
      if (std::find(borrowed.begin(), borrowed.end(), t.worker_id) == borrowed.end()) ids.push_back(t.worker_id);
    }
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
  // Each task says why it ended: the cluster's outcome, and its own status.
  if (!alive.empty()) {
    api::Cluster current;
    {
      std::lock_guard<std::mutex> lock(mu_);
      current = clusters_[id].cluster;
    }
    if (failed_rank) current.failed_rank = failed_rank;
    std::vector<api::Worker> task_workers;  // every task's, in task order (the mode places ranks by them)
    for (const auto& t : current.tasks) {
      if (auto w = registry_.get(t.worker_id)) task_workers.push_back(w.value());
    }
    auto endings = task_workers.size() == current.tasks.size()
                       ? mode_of(current.request).endings(current, status, task_workers)
                       : std::map<std::string, WorkerRegistry::Ending>{};
    if (auto stopped = registry_.stop(alive, task_reason(id, status, reason), endings); !stopped) {
      spdlog::error("cluster {}: {}", id, stopped.status().message());
    }
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    Entry& e = clusters_[id];
    e.cluster.status = status;
    e.cluster.reason = reason;
    e.cluster.finished_at = format_time(clock_.wall());
    e.finished = clock_.now();
    if (failed_rank) e.cluster.failed_rank = std::move(failed_rank);
    if (!e.cluster.launcher_exit_code) e.cluster.launcher_exit_code = launcher_code;
    e.cluster.launcher_process.reset();  // ended above (or by restore())
    for (auto& g : e.cluster.generations) {
      if (!g.ended_at) g.ended_at = e.cluster.finished_at;
    }
    persist_locked(e);
    ended = e.cluster;
  }
  ended_cv_.notify_all();
  mode_of(ended.request).ended(ended);
  spdlog::info("cluster {} {}{}{}", id, api::cluster_status_name(status), reason.empty() ? "" : ": ", reason);
}

void ClusterManager::step() {
  std::vector<std::string> active;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [id, e] : clusters_) {
      if (e.launched && !e.ending && !e.restarting && !is_terminal(e.cluster.status)) active.push_back(id);
    }
  }
  for (const auto& id : active) evaluate(id);
}

ClusterMode& ClusterManager::mode_of(const api::ClusterRequest& request) const {
  switch (request.mode) {
    case api::ClusterKind::kMpi: return *mpi_;
    case api::ClusterKind::kElastic: return *elastic_;
    case api::ClusterKind::kTorchrun: return *torchrun_;
    case api::ClusterKind::kPs: break;
  }
  return *ps_;
}

void ClusterManager::evaluate(const std::string& id) {
  api::Cluster c;
  TimePoint deadline;
  bool has_launcher = false;
  bool wired = false;
  std::map<std::string, std::string> pending_release;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = clusters_.find(id);
    if (it == clusters_.end() || it->second.ending || it->second.restarting ||
        api::is_terminal(it->second.cluster.status)) {
      return;
    }
    c = it->second.cluster;
    deadline = it->second.deadline;
    has_launcher = it->second.launcher != nullptr;
    wired = it->second.wired;
    pending_release = it->second.pending_release;
  }
  ClusterMode& mode = mode_of(c.request);

  std::vector<api::Worker> workers;
  for (const auto& t : c.tasks) {
    auto w = registry_.get(t.worker_id);
    if (!w) return finish(id, api::ClusterStatus::kFailed, c.task_name(t) + " is gone: " + w.status().message());
    workers.push_back(w.value());
  }

  // d) + e) Any task that ended badly ends the cluster, unless restarts are
  // left. When several have (a rank raised and its peers then failed on the
  // broken link), the root cause is the one whose own code failed first
  // (failure_report.h); while the only failures read as a peer's and their
  // peer still runs, the pass waits for it, up to kRootCauseGrace.
  std::vector<size_t> ended_badly;
  for (size_t i = 0; i < c.tasks.size(); ++i) {
    if (!api::is_terminal(workers[i].status) || mode.may_end(c.tasks[i], workers[i])) continue;
    ended_badly.push_back(i);
  }
  std::stable_sort(ended_badly.begin(), ended_badly.end(), [&](size_t a, size_t b) {
    return workers[a].finished_at.value_or("") < workers[b].finished_at.value_or("");
  });
  if (!ended_badly.empty()) {
    FailedTasks failed = read_failed_tasks(registry_, c, workers, ended_badly);
    const bool others_run = std::any_of(workers.begin(), workers.end(),
                                        [](const api::Worker& w) { return !api::is_terminal(w.status); });
    if (failed.waiting_for_cause && others_run) {
      std::lock_guard<std::mutex> lock(mu_);
      auto& e = clusters_[id];
      if (!e.failure_seen) e.failure_seen = clock_.now();
      if (clock_.now() - *e.failure_seen < kRootCauseGrace) return;
    }
    const size_t i = failed.cause;
    std::string reason = std::move(failed.reason);
    {
      std::lock_guard<std::mutex> lock(mu_);
      clusters_[id].failure_seen.reset();
    }
    if (c.restarts < c.request.max_restarts) {
      if (wired && mode.replaceable(c, c.tasks[i])) return replace_task(id, i, reason);
      return restart(id, reason, i);
    }
    if (has_launcher) reason += "; mpirun was aborted";
    if (c.request.max_restarts > 0) {
      reason += " (after " + std::to_string(c.restarts) + " restarts: max_restarts " +
                std::to_string(c.request.max_restarts) + " reached)";
    }
    return finish(id, api::ClusterStatus::kFailed, reason, std::move(failed.rank));
  }

  // a) + b) Starting (again after a restart): wired once every task is ready.
  if (!wired) {
    auto pending = std::find_if(workers.begin(), workers.end(), [&](const api::Worker& w) { return !mode.ready(w); });
    if (pending == workers.end()) return wire(c, workers);
    if (clock_.now() >= deadline) {
      finish(id, api::ClusterStatus::kFailed,
             c.task_name(c.tasks[static_cast<size_t>(pending - workers.begin())]) + " did not register within " +
                 seconds_text(c.request.timeout_seconds) + " s (timeout_seconds)");
    }
    return;
  }

  // e) Replaced tasks get their predecessor's release once they registered.
  for (const auto& [fresh, replaced] : pending_release) {
    auto w = std::find_if(workers.begin(), workers.end(), [&](const api::Worker& x) { return x.id == fresh; });
    if (w == workers.end() || !mode.ready(*w)) continue;
    std::optional<Release> release;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto& e = clusters_[id];
      e.pending_release.erase(fresh);
      auto r = e.releases.find(replaced);
      if (r != e.releases.end()) {
        release = r->second;
        e.releases[fresh] = r->second;
      }
    }
    if (release) (void)registry_.release(fresh, std::move(*release));
  }

  // f) A supervising mode's pass.
  if (supervise(id, c, workers)) return;

  // c) Running: the mode decides when it ended.
  std::optional<int> code;
  if (has_launcher) {
    std::lock_guard<std::mutex> lock(mu_);
    auto& e = clusters_[id];
    if (e.launcher) code = e.launcher->poll();
    if (code) e.cluster.launcher_exit_code = code;
  }
  if (auto verdict = mode.verdict(c, workers, code)) {
    if (verdict->status == api::ClusterStatus::kFailed && c.restarts < c.request.max_restarts) {
      return restart(id, verdict->reason, std::nullopt);
    }
    if (verdict->status == api::ClusterStatus::kFailed && c.request.max_restarts > 0) {
      verdict->reason += " (after " + std::to_string(c.restarts) + " restarts: max_restarts " +
                         std::to_string(c.request.max_restarts) + " reached)";
    }
    finish(id, verdict->status, verdict->reason, std::move(verdict->failed_rank));
  }
}

bool ClusterManager::supervise(const std::string& id, const api::Cluster& c, const std::vector<api::Worker>& workers) {
  api::Cluster copy = c;
  Supervision sup = mode_of(c.request).supervise(copy, workers);
  if (sup.changed) {
    std::lock_guard<std::mutex> lock(mu_);
    auto& e = clusters_[id];
    if (!e.ending && !api::is_terminal(e.cluster.status)) {
      e.cluster.tasks = copy.tasks;
      e.cluster.generations = copy.generations;
      e.cluster.resets = copy.resets;
      e.cluster.elastic_state = copy.elastic_state;
      persist_locked(e);
    }
  }
  if (!sup.stop.empty()) (void)registry_.stop(sup.stop);
  if (!sup.verdict) return false;
  finish(id, sup.verdict->status, sup.verdict->reason);
  return true;
}

void ClusterManager::wire(const api::Cluster& c, const std::vector<api::Worker>& workers) {
  auto wired = mode_of(c.request).wire(c, workers);
  if (!wired) return finish(c.id, api::ClusterStatus::kFailed, wired.status().message());
  Wiring w = std::move(wired).value();
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto& e = clusters_[c.id];
    if (!w.cluster_spec.is_null()) e.cluster.cluster_spec = w.cluster_spec;
    e.cluster.horovodrun_argv = w.horovodrun_argv;
    e.cluster.mpirun_argv = w.mpirun_argv;
    e.cluster.torchrun_argv = w.torchrun_argv;
    e.cluster.hostfile = w.hostfile;
    if (e.ending || api::is_terminal(e.cluster.status)) {
      // Stopped while it was being wired: end what it started here.
      if (w.launcher) w.launcher->terminate(options_.launcher_grace);
      persist_locked(e);
      mode_of(c.request).ended(e.cluster);
      return;
    }
    if (w.launcher && w.launcher->identity().valid()) e.cluster.launcher_process = w.launcher->identity();
    e.launcher = std::move(w.launcher);
    e.cluster.status = api::ClusterStatus::kRunning;
    e.wired = true;
    e.wired_at = clock_.now();
    // Under max_restarts every cluster keeps its generations: the first
    // starts here; a restarted one is up again (its recovery time).
    if (c.request.max_restarts > 0 && e.cluster.generations.empty()) {
      api::ClusterGeneration g;
      g.generation = 1;
      g.cause = "start";
      g.started_at = format_time(to_wall(clock_, e.wired_at));
      for (const auto& t : e.cluster.tasks) g.members.push_back(t.worker_id);
      e.cluster.generations.push_back(std::move(g));
    } else if (e.restart_began && !e.cluster.generations.empty()) {
      e.cluster.generations.back().recovery_seconds =
          std::chrono::duration<double>(e.wired_at - *e.restart_began).count();
      e.restart_began.reset();
    }
    for (const auto& [worker_id, release] : w.releases) e.releases[worker_id] = release;
    persist_locked(e);
  }
  spdlog::info("cluster {} running: {}", c.id, w.summary);
  // A release that fails (the task ended meanwhile) shows up as that task's
  // end on the next pass.
  for (auto& [worker_id, release] : w.releases) {
    if (auto s = registry_.release(worker_id, std::move(release)); !s) {
      spdlog::info("cluster {}: task {} was not released ({})", c.id, worker_id, s.message());
    }
  }
}

}  // namespace muster::service
