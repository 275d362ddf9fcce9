#include "service/cluster/manager.h"

#include <algorithm>

#include <spdlog/spdlog.h>

#include "service/random_hex.h"
#include "service/cluster/mpi_mode.h"
#include "service/cluster/ps_mode.h"
#include "service/cluster/torchrun_mode.h"

namespace muster::service {

namespace fs = std::filesystem;

ClusterManager::ClusterManager(ClusterManagerOptions options, WorkerRegistry& registry, ClusterStore* store,
                               const Clock& clock, std::unique_ptr<Launcher> launcher, workers::MpiHosts* mpi_hosts)
    : options_(std::move(options)),
      registry_(registry),
      store_(store),
      clock_(clock),
      launcher_(launcher ? std::move(launcher) : make_process_launcher({})) {
  ps_ = std::make_unique<PsMode>(PsModeOptions{options_.validation.project_dir, options_.ps_program});
  mpi_ = std::make_unique<MpiMode>(
      MpiModeOptions{options_.state_dir, options_.validation.project_dir, options_.mpirun,
                           options_.mpirun_extra_args},
      registry_, *launcher_, mpi_hosts);
  elastic_ = std::make_unique<ElasticMode>(
      ElasticModeOptions{options_.validation.project_dir, options_.elastic_rejoin_timeout}, registry_, clock_);
  torchrun_ = std::make_unique<TorchrunMode>(TorchrunModeOptions{options_.validation.project_dir});
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
  // Jobs still running outlive the daemon, as workers do: the next daemon
  // takes them back by the identity in the cluster's record (restore()).
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [id, e] : clusters_) {
    if (e.launcher) e.launcher->detach();
  }
}

void ClusterManager::loop() {
  auto next_retention = std::chrono::steady_clock::now();
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(wake_mu_);
      wake_cv_.wait_for(lock, options_.tick, [this] { return wake_ || quit_; });
      if (quit_) return;
      wake_ = false;
    }
    step();
    if (std::chrono::steady_clock::now() >= next_retention) {
      apply_retention();
      next_retention = std::chrono::steady_clock::now() + std::chrono::seconds(1);
    }
  }
}

void ClusterManager::persist_locked(const Entry& e) {
  // api::Cluster changes follow events that already happened (a task ended, a
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

api::Result<api::Cluster> ClusterManager::create(const api::ClusterRequest& request,
                                                 std::vector<std::string>* warnings) {
  Entry e;
  e.cluster.request = request;
  e.cluster.created_at = format_time(clock_.wall());
  {
    std::lock_guard<std::mutex> lock(mu_);
    do {
      e.cluster.id = "c-" + random_hex(4);
    } while (clusters_.count(e.cluster.id));
    e.seq = next_seq_++;
  }
  const std::string id = e.cluster.id;
  e.dir = options_.state_dir / "clusters" / id;

  auto planned = mode_of(request).plan(id, request);
  if (!planned) return planned.status();
  std::vector<TaskBatch> batches = std::move(planned->batches);
  e.cluster.script_path = std::move(planned->script_path);

  std::error_code ec;
  fs::create_directories(e.dir, ec);
  if (ec) return api::internal_error("cannot create the cluster directory " + e.dir.string() + ": " + ec.message());

  // Insert first (not yet launched) so that registry events for these
  // workers find their cluster; step() skips it until the tasks are known.
  {
    std::lock_guard<std::mutex> lock(mu_);
    clusters_[id] = std::move(e);
  }
  std::vector<api::ClusterTask> tasks;
  // The one launch call of the cluster side: every batch at once, all or
  // nothing, and admitted whole (service/registry/registry.h, "Admission").
  std::vector<LaunchBatch> to_launch;
  for (const auto& b : batches) {
    if (b.existing.empty()) to_launch.push_back(b.batch);
  }
  std::vector<std::vector<api::Worker>> launched_batches;
  if (!to_launch.empty()) {
    auto launched = registry_.launch_together(to_launch, warnings);
    if (!launched) {
      std::lock_guard<std::mutex> lock(mu_);
      clusters_.erase(id);
      return launched.status();
    }
    launched_batches = std::move(launched).value();
  }
  size_t next_launched = 0;
  for (const auto& b : batches) {
    int index = 0;
    if (!b.existing.empty()) {  // running workers play these tasks: nothing to launch
      for (const auto& wid : b.existing) tasks.push_back({b.type, index++, wid});
      continue;
    }
    for (const auto& w : launched_batches[next_launched++]) tasks.push_back({b.type, index++, w.id});
  }

  api::Cluster out;
  {
    std::lock_guard<std::mutex> lock(mu_);
    Entry& placed = clusters_[id];
    placed.cluster.tasks = std::move(tasks);
    placed.launched = true;
    if (request.timeout_seconds > 0) {
      placed.deadline = clock_.now() + seconds_duration(request.timeout_seconds);
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

std::vector<api::Cluster> ClusterManager::list() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::pair<uint64_t, api::Cluster>> sorted;
  for (const auto& [id, e] : clusters_) {
    if (e.launched) sorted.emplace_back(e.seq, e.cluster);
  }
  std::sort(sorted.begin(), sorted.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<api::Cluster> out;
  for (auto& [seq, c] : sorted) out.push_back(std::move(c));
  return out;
}

api::Result<api::Cluster> ClusterManager::get(const std::string& id) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = clusters_.find(id);
  if (it == clusters_.end() || !it->second.launched) return api::not_found("no cluster '" + id + "'");
  return it->second.cluster;
}

api::Result<std::shared_ptr<elastic::World>> ClusterManager::world_of_worker(const std::string& worker_id) const {
  auto w = registry_.get(worker_id);
  if (!w) return w.status();
  if (!w->cluster_id) return api::not_found("worker " + worker_id + " is not part of a cluster");
  auto world = elastic_->world(*w->cluster_id);
  if (!world) {
    return api::not_found("worker " + worker_id + " is not a rank of a running elastic cluster (cluster " +
                          *w->cluster_id + ")");
  }
  return world;
}

api::Result<std::filesystem::path> ClusterManager::log_path(const std::string& id) const {
  LogSource source;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = clusters_.find(id);
    if (it == clusters_.end() || !it->second.launched) return api::not_found("no cluster '" + id + "'");
    source = mode_of(it->second.cluster.request).log(it->second.cluster);
  }
  if (source.worker_id.empty()) return source.file;
  // Outside mu_: registry calls never happen under the manager's mutex.
  auto path = registry_.log_path(source.worker_id);
  if (!path) return std::filesystem::path();
  return path.value();
}

api::Result<api::Cluster> ClusterManager::stop(const std::string& id) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = clusters_.find(id);
    if (it == clusters_.end() || !it->second.launched) return api::not_found("no cluster '" + id + "'");
  }
  finish(id, api::ClusterStatus::kStopped, "stopped by request");
  return get(id);
}

}  // namespace muster::service
