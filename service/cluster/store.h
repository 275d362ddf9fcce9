// ClusterStore: clusters in the daemon's SQLite state database, beside the
// workers (same file, table `clusters`, a Store of its own), so a restarted
// daemon still lists every cluster with its status and reason.
//
// One row per cluster holding Cluster::to_record() as JSON, so adding a field
// needs no migration. Thread-safe (the Store serialises its calls).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "api/status.h"
#include "service/store.h"

namespace muster::service {

class ClusterStore {
 public:
  // Opens (creating) the database at `path`; ":memory:" for tests.
  static api::Result<std::unique_ptr<ClusterStore>> open(const std::string& path);

  api::Status put(const std::string& id, uint64_t seq, const nlohmann::json& record);
  api::Status remove(const std::string& id);
  // Every record, in creation order; a garbled row is left out and described
  // in `skipped` ("<id>: why").
  api::Result<std::vector<nlohmann::json>> load_all(std::vector<std::string>* skipped = nullptr);
  // Write failures go to `health` (see Store).
  void set_health(StoreHealth* health) { table_->set_health(health); }

 private:
  explicit ClusterStore(std::unique_ptr<Store> table) : table_(std::move(table)) {}
  std::unique_ptr<Store> table_;
};

}  // namespace muster::service
