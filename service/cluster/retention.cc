// ClusterManager's bounds on finished clusters: DELETE of one, and
// retention by age and count (manager.h). A cluster goes with its
// workers (WorkerRegistry::remove_finished) and its directory, record
// first, then files, then the row, as the registry does for workers.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <system_error>

#include "service/cluster/manager.h"

namespace muster::service {

namespace fs = std::filesystem;

api::Status ClusterManager::remove(const std::string& id) {
  std::vector<std::string> workers;
  fs::path dir;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = clusters_.find(id);
    if (it == clusters_.end() || !it->second.launched) return api::not_found("no cluster '" + id + "'");
    if (!is_terminal(it->second.cluster.status) || it->second.ending) {
      return api::conflict("cluster " + id + " is " + api::cluster_status_name(it->second.cluster.status) +
                           "; stop it before deleting it");
    }
    for (const auto& t : it->second.cluster.tasks) workers.push_back(t.worker_id);
  }
  // Its workers first: one that has not finished keeps the cluster too.
  if (auto s = registry_.remove_finished(workers); !s) return s;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = clusters_.find(id);
    if (it == clusters_.end()) return api::Status::ok();  // another DELETE won
    dir = it->second.dir;
    clusters_.erase(it);
  }
  std::error_code ec;
  fs::remove_all(dir, ec);
  if (ec) spdlog::warn("cluster {}: cannot remove {}: {}", id, dir.string(), ec.message());
  if (store_) {
    if (auto s = store_->remove(id); !s) spdlog::debug("cluster {}: its row stays in the store: {}", id, s.message());
  }
  return api::Status::ok();
}

// Finished clusters, oldest first, go while there are more than
// max_finished or they ended more than retain_for ago.
void ClusterManager::apply_retention() {
  std::vector<std::pair<TimePoint, std::string>> finished;
  const TimePoint now = clock_.now();
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [id, e] : clusters_) {
      if (e.launched && !e.ending && is_terminal(e.cluster.status)) finished.emplace_back(e.finished, id);
    }
  }
  std::sort(finished.begin(), finished.end());
  const size_t excess = finished.size() > options_.max_finished ? finished.size() - options_.max_finished : 0;
  size_t removed = 0;
  for (size_t i = 0; i < finished.size(); ++i) {
    if (i >= excess && now - finished[i].first <= options_.retain_for) break;
    if (auto s = remove(finished[i].second); !s) {
      spdlog::warn("retention: cluster {} stays: {}", finished[i].second, s.message());
    } else {
      ++removed;
    }
  }
  if (removed) spdlog::info("retention: forgot {} finished cluster(s)", removed);
}

}  // namespace muster::service
