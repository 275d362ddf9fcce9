// WorkerRegistry's bounds on finished records (registry.h, "Bounds"):
// retention by age and by count, and DELETE of one finished worker. A
// forgotten worker loses its record in memory first, then (outside the
// mutex) its directory, then its row, so a crash in between leaves at worst a
// row without a directory, never a directory without a row (which restore()
// would refuse).
#include <spdlog/spdlog.h>

#include <algorithm>
#include <system_error>

#include "service/registry/registry.h"

namespace muster::service {

namespace fs = std::filesystem;

void WorkerRegistry::drop_locked(const std::string& id, Effects& fx) {
  auto it = records_.find(id);
  if (it == records_.end()) return;
  token_to_id_.erase(it->second.agent_token);
  by_seq_.erase(it->second.seq);
  dirty_.erase(id);
  erase_locked(it);
  fx.removed.push_back(id);
}

void WorkerRegistry::finish_removal(const std::vector<std::string>& ids) {
  for (const auto& id : ids) {
    std::error_code ec;
    fs::remove_all(options_.state_dir / "workers" / id, ec);
    if (ec) spdlog::warn("worker {}: cannot remove its directory: {}", id, ec.message());
    backend_.forget(id);
  }
  if (store_) {
    if (auto s = store_->remove(ids); !s) {
      // Logged by the store's health; a restarted daemon finds the rows
      // again and forgets them again.
      spdlog::debug("{} forgotten worker row(s) stay in the store: {}", ids.size(), s.message());
    }
  }
}

// At most once a second, from tick(): finished workers outside clusters,
// oldest first, go while there are more than max_finished or they finished
// more than retain_for ago.
void WorkerRegistry::apply_retention(Effects& fx) {
  const TimePoint now = clock_.now();
  if (last_retention_ != TimePoint{} && now - last_retention_ < std::chrono::seconds(1)) return;
  last_retention_ = now;
  std::vector<std::pair<TimePoint, std::string>> finished;
  for (const auto& [id, r] : records_) {
    if (api::is_terminal(r.worker.status) && !r.worker.cluster_id) finished.emplace_back(r.finished, id);
  }
  const auto& policy = options_.retention;
  if (finished.size() <= policy.max_finished &&
      (finished.empty() || now - std::min_element(finished.begin(), finished.end())->first <= policy.retain_for)) {
    return;
  }
  std::sort(finished.begin(), finished.end());
  const size_t excess = finished.size() > policy.max_finished ? finished.size() - policy.max_finished : 0;
  size_t dropped = 0;
  for (size_t i = 0; i < finished.size(); ++i) {
    if (i >= excess && now - finished[i].first <= policy.retain_for) break;
    drop_locked(finished[i].second, fx);
    ++dropped;
  }
  if (dropped) spdlog::info("retention: forgot {} finished worker(s)", dropped);
}

api::Status WorkerRegistry::remove(const std::string& id) {
  Effects fx;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = records_.find(id);
    if (it == records_.end()) return api::not_found("no worker '" + id + "'");
    const api::Worker& w = it->second.worker;
    if (!api::is_terminal(w.status)) {
      return api::conflict("worker " + id + " is " + api::worker_status_name(w.status) +
                           "; stop it before deleting it");
    }
    if (w.cluster_id) {
      return api::conflict("worker " + id + " belongs to cluster " + *w.cluster_id + "; delete the cluster instead");
    }
    drop_locked(id, fx);
  }
  run(std::move(fx));
  return api::Status::ok();
}

api::Status WorkerRegistry::remove_finished(const std::vector<std::string>& ids) {
  Effects fx;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& id : ids) {
      auto it = records_.find(id);
      if (it != records_.end() && !api::is_terminal(it->second.worker.status)) {
        return api::conflict("worker " + id + " is " + api::worker_status_name(it->second.worker.status) +
                             "; stop it first");
      }
    }
    for (const auto& id : ids) drop_locked(id, fx);
  }
  run(std::move(fx));
  return api::Status::ok();
}

}  // namespace muster::service
