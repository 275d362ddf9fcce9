// Store: the daemon's state in SQLite (<state-dir>/musterd.db), so that a
// restarted daemon has every worker back with its status and agent token.
//
// One row per worker; the record is a JSON document (the API worker object
// plus the daemon-only fields) so that adding a field needs no migration.
// The registry calls the store under its own lock; the store is not
// thread-safe by itself.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "muster/api/status.h"

struct sqlite3;

namespace muster::service {

struct StoredRecord {
  std::string id;
  uint64_t seq = 0;        // launch order
  nlohmann::json record;   // see WorkerRegistry's record_to_json
};

class Store {
 public:
  // Opens (creating) the database; ":memory:" for tests.
  static api::Result<std::unique_ptr<Store>> open(const std::string& path);
  ~Store();
  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;

  // Inserts or replaces, all in one transaction.
  api::Status put(const std::vector<StoredRecord>& records);
  api::Status remove(const std::vector<std::string>& ids);
  // Every record, in launch order.
  api::Result<std::vector<StoredRecord>> load_all();

 private:
  explicit Store(sqlite3* db) : db_(db) {}
  api::Status exec(const char* sql);
  sqlite3* db_;
};

}  // namespace muster::service
