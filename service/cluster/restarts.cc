// ClusterManager, step e) of manager.h: restarts under max_restarts
// (torchrun's semantics: every task again, the script resuming from its own
// checkpoint) and tasks replaced alone (a ps worker, with its TF_CONFIG).
// Both run on the manager's thread; registry and launcher calls happen
// outside the manager's mutex, and a stop() that arrives meanwhile wins.
#include <spdlog/spdlog.h>

#include "api/base/worker_env.h"
#include "service/cluster/manager.h"

namespace muster::service {

namespace {

// The generation the cluster is in, created as generation 1 (its start) when
// this is its first failure.
api::ClusterGeneration& current_generation(api::Cluster& c, WallTime started) {
  if (c.generations.empty()) {
    api::ClusterGeneration g;
    g.generation = 1;
    g.cause = "start";
    g.started_at = format_time(started);
    for (const auto& t : c.tasks) g.members.push_back(t.worker_id);
    c.generations.push_back(std::move(g));
  }
  return c.generations.back();
}

std::string task_label(const api::ClusterTask& t) { return t.type + " " + std::to_string(t.index); }

}  // namespace

api::Result<ClusterManager::Relaunched> ClusterManager::relaunch(const api::Cluster& c, int restart_count,
                                                                 std::optional<size_t> only_task) {
  auto planned = mode_of(c.request).plan(c.id, c.request);
  if (!planned) return planned.status();
  std::vector<TaskBatch> batches = std::move(planned->batches);
  if (only_task) {
    // One task of the batch of its type: n = 1, under the same index.
    const api::ClusterTask& t = c.tasks[*only_task];
    std::vector<TaskBatch> one;
    for (auto& b : batches) {
      if (b.type != t.type) continue;
      b.batch.request.n = 1;
      b.batch.per_worker.resize(1);
      one.push_back(std::move(b));
      break;
    }
    if (one.empty()) return api::internal_error("no launch batch of type " + t.type + " to replace " + c.task_name(t));
    batches = std::move(one);
  }
  // One launch of every batch: all or nothing, admitted whole.
  std::vector<LaunchBatch> to_launch;
  for (auto& b : batches) {
    for (auto& extras : b.batch.per_worker) extras.env[base::kEnvRestartCount] = std::to_string(restart_count);
    to_launch.push_back(b.batch);
  }
  auto launched = registry_.launch_together(to_launch);
  if (!launched) return launched.status();
  Relaunched out;
  out.script_path = std::move(planned->script_path);
  for (size_t i = 0; i < batches.size(); ++i) {
    int index = only_task ? c.tasks[*only_task].index : 0;
    for (const auto& w : launched.value()[i]) out.tasks.push_back({batches[i].type, index++, w.id});
  }
  return out;
}

// Every task again:
//   a) under the mutex: the cluster is `restarting` (the pass skips it), its
//      launcher taken, its tasks listed;
//   b) outside it: the launcher ended, every live task stopped (their
//      processes gone), the mode's batches launched again;
//   c) under the mutex: the generation that failed is closed with its death,
//      the next one opened with the new tasks; the cluster waits for its
//      tasks and is wired again (a) and b)). A stop() that came meanwhile wins: the
//      new tasks are stopped and the cluster ends as finish() decided.
void ClusterManager::restart(const std::string& id, const std::string& reason, std::optional<size_t> failed_task) {
  std::unique_ptr<LauncherProcess> launcher;
  api::Cluster c;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto& e = clusters_[id];
    if (e.ending || e.restarting || api::is_terminal(e.cluster.status)) return;
    e.restarting = true;
    launcher = std::move(e.launcher);
    e.cluster.launcher_process.reset();
    c = e.cluster;
  }
  const TimePoint failed_at = clock_.now();
  spdlog::warn("cluster {}: {}; restarting every task ({} of {} restarts)", id, reason, c.restarts + 1,
               c.request.max_restarts);
  if (launcher) launcher->terminate(options_.launcher_grace);
  std::vector<std::string> alive;
  for (const auto& t : c.tasks) {
    auto w = registry_.get(t.worker_id);
    if (w && !api::is_terminal(w->status)) alive.push_back(t.worker_id);
  }
  if (!alive.empty()) (void)registry_.stop(alive);

  auto relaunched = relaunch(c, c.restarts + 1, std::nullopt);
  std::vector<std::string> orphans;
  bool stopped = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto& e = clusters_[id];
    e.restarting = false;
    if (e.ending || api::is_terminal(e.cluster.status)) {
      stopped = true;
      if (relaunched) {
        for (const auto& t : relaunched->tasks) orphans.push_back(t.worker_id);
      }
    } else if (relaunched) {
      std::vector<api::ClusterTask>& tasks = relaunched->tasks;
      api::ClusterGeneration& g = current_generation(e.cluster, to_wall(clock_, e.wired_at));
      g.ended_at = format_time(to_wall(clock_, failed_at));
      g.end_reason = reason;
      if (failed_task) {
        const auto& t = e.cluster.tasks[*failed_task];
        g.deaths.push_back({t.worker_id, task_label(t), reason, format_time(to_wall(clock_, failed_at))});
      }
      api::ClusterGeneration next;
      next.generation = g.generation + 1;
      next.cause = "restart";
      next.started_at = format_time(clock_.wall());
      for (const auto& t : tasks) next.members.push_back(t.worker_id);
      e.cluster.generations.push_back(std::move(next));
      e.cluster.tasks = std::move(tasks);
      e.cluster.script_path = std::move(relaunched->script_path);
      e.cluster.restarts += 1;
      e.cluster.reason = "restarted " + std::to_string(e.cluster.restarts) + " of " +
                         std::to_string(e.cluster.request.max_restarts) + " times; last: " + reason;
      e.wired = false;
      e.restart_began = failed_at;
      e.releases.clear();
      e.pending_release.clear();
      if (e.cluster.request.timeout_seconds > 0) {
        e.deadline = clock_.now() + std::chrono::duration_cast<TimePoint::duration>(
                                        std::chrono::duration<double>(e.cluster.request.timeout_seconds));
      }
      persist_locked(e);
    }
  }
  if (!orphans.empty()) (void)registry_.stop(orphans);
  if (stopped) return;
  if (!relaunched) {
    finish(id, api::ClusterStatus::kFailed, reason + "; the restart failed: " + relaunched.status().message());
    return;
  }
  std::lock_guard<std::mutex> lock(wake_mu_);
  wake_ = true;
  wake_cv_.notify_one();
}

// One task again (a ps worker): a held worker under the same index; the
// pass releases it with its predecessor's release once it registered.
void ClusterManager::replace_task(const std::string& id, size_t index, const std::string& reason) {
  api::Cluster c;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto& e = clusters_[id];
    if (e.ending || e.restarting || api::is_terminal(e.cluster.status)) return;
    e.restarting = true;
    c = e.cluster;
  }
  const TimePoint failed_at = clock_.now();
  auto relaunched = relaunch(c, c.restarts + 1, index);
  std::vector<std::string> orphans;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto& e = clusters_[id];
    e.restarting = false;
    if (e.ending || api::is_terminal(e.cluster.status)) {
      if (relaunched) {
        for (const auto& t : relaunched->tasks) orphans.push_back(t.worker_id);
      }
    } else if (relaunched && relaunched->tasks.size() == 1) {
      const std::string replaced = e.cluster.tasks[index].worker_id;
      const std::string by = relaunched->tasks.front().worker_id;
      api::ClusterGeneration& g = current_generation(e.cluster, to_wall(clock_, e.wired_at));
      g.deaths.push_back({replaced, task_label(e.cluster.tasks[index]), reason, format_time(to_wall(clock_, failed_at))});
      g.replacements.push_back({replaced, by, format_time(clock_.wall())});
      e.cluster.tasks[index].worker_id = by;
      e.cluster.script_path = std::move(relaunched->script_path);
      e.cluster.restarts += 1;
      e.cluster.reason = "replaced " + task_label(e.cluster.tasks[index]) + " (" + std::to_string(e.cluster.restarts) +
                         " of " + std::to_string(e.cluster.request.max_restarts) + " restarts): " + reason;
      e.pending_release[by] = replaced;
      persist_locked(e);
      spdlog::warn("cluster {}: {}; worker {} replaces it", id, reason, by);
    }
  }
  if (!orphans.empty()) (void)registry_.stop(orphans);
  if (!relaunched) {
    finish(id, api::ClusterStatus::kFailed, reason + "; its replacement failed: " + relaunched.status().message());
  }
}

}  // namespace muster::service
