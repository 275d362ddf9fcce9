// Store: one table of the daemon's state in SQLite (<state-dir>/musterd.db),
// so that a restarted daemon has every worker (table `workers`) and every
// cluster (table `clusters`, see cluster/store.h) back with its status.
//
// One row per object: its id, the order it was created in, and a JSON record
// (the API object plus the daemon-only fields), so that adding a field needs
// no migration. Each table has its own connection; calls are serialised by an
// internal mutex. open() refuses a database it could only read or whose
// quick_check fails (sqlite_db.h), so a daemon never starts on state it
// cannot keep. Every write reports to the StoreHealth
// given (logged once per failing episode, /healthz).
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "api/status.h"
#include "service/sqlite_db.h"
#include "service/store_health.h"

namespace muster::service {

struct StoredRecord {
  std::string id;
  uint64_t seq = 0;        // launch order
  nlohmann::json record;   // see WorkerRegistry's record_to_json
};

class Store {
 public:
  // Opens (creating) the database and `table`; ":memory:" for tests. The
  // table name is one of ours ("workers", "clusters"), never user input.
  static api::Result<std::unique_ptr<Store>> open(const std::string& path, const std::string& table = "workers");
  ~Store();
  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;

  // Inserts or replaces, all in one transaction: on any error (a full or
  // read-only disk included) nothing of the call is written, and the error
  // names the table.
  api::Status put(const std::vector<StoredRecord>& records);
  // Called with the seconds every put() took (for /metrics); set before use.
  void set_write_observer(std::function<void(double seconds)> observer) { write_observer_ = std::move(observer); }
  // Where write failures are reported (null: nowhere); set before use.
  void set_health(StoreHealth* health) { health_ = health; }
  api::Status remove(const std::vector<std::string>& ids);
  // Every record, in launch order. A row whose record is not JSON is left
  // out and described in `skipped` ("<id>: why").
  api::Result<std::vector<StoredRecord>> load_all(std::vector<std::string>* skipped = nullptr);

 private:
  Store(std::unique_ptr<SqliteDb> db, std::string table);
  api::Status put_unobserved(const std::vector<StoredRecord>& records);
  api::Status exec(const std::string& sql);
  // BEGIN, body, COMMIT; ROLLBACK when the body or the COMMIT fails.
  api::Status in_transaction(const std::function<api::Status()>& body);
  std::function<void(double)> write_observer_;
  StoreHealth* health_ = nullptr;
  api::Status reported(api::Status s);
  api::Status error(const std::string& what) const;
  std::mutex mu_;
  std::unique_ptr<SqliteDb> db_;
  std::string table_;
};

}  // namespace muster::service
