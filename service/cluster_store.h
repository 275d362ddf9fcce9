// ClusterStore: clusters in the daemon's SQLite state database, beside the
// workers (same file, table `clusters`, its own connection), so a restarted
// daemon still lists every cluster with its status and reason.
//
// One row per cluster holding Cluster::to_record() as JSON, so adding a field
// needs no migration. Thread-safe (one internal mutex).
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "muster/api/status.h"

struct sqlite3;

namespace muster::service {

class ClusterStore {
 public:
  // Opens (creating) the database at `path`; ":memory:" for tests.
  static api::Result<std::unique_ptr<ClusterStore>> open(const std::string& path);
  ~ClusterStore();
  ClusterStore(const ClusterStore&) = delete;
  ClusterStore& operator=(const ClusterStore&) = delete;

  api::Status put(const std::string& id, uint64_t seq, const nlohmann::json& record);
  // Every record, in creation order; corrupt rows are skipped.
  api::Result<std::vector<nlohmann::json>> load_all();

 private:
  explicit ClusterStore(sqlite3* db) : db_(db) {}
  api::Status exec(const char* sql);
  std::mutex mu_;
  sqlite3* db_;
};

}  // namespace muster::service
