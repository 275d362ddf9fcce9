#include "muster/service/store.h"

#include <sqlite3.h>

namespace muster::service {

namespace {
// Finalizes a statement when it goes out of scope.
struct Statement {
  sqlite3_stmt* stmt = nullptr;
  ~Statement() { sqlite3_finalize(stmt); }
};
}  // namespace

api::Result<std::unique_ptr<Store>> Store::open(const std::string& path) {
  sqlite3* db = nullptr;
  if (sqlite3_open(path.c_str(), &db) != SQLITE_OK) {
    std::string msg = db ? sqlite3_errmsg(db) : "out of memory";
    sqlite3_close(db);
    return api::internal_error("cannot open state database " + path + ": " + msg);
  }
  std::unique_ptr<Store> store(new Store(db));
  sqlite3_busy_timeout(db, 5000);
  if (auto s = store->exec("PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;"); !s) return s;
  if (auto s = store->exec(
          "CREATE TABLE IF NOT EXISTS workers (id TEXT PRIMARY KEY, seq INTEGER NOT NULL, record TEXT NOT NULL);");
      !s) {
    return s;
  }
  return store;
}

Store::~Store() { sqlite3_close(db_); }

api::Status Store::exec(const char* sql) {
  char* err = nullptr;
  if (sqlite3_exec(db_, sql, nullptr, nullptr, &err) != SQLITE_OK) {
    std::string msg = err ? err : "unknown error";
    sqlite3_free(err);
    return api::internal_error(std::string("state database: ") + msg);
  }
  return api::Status::ok();
}

api::Status Store::put(const std::vector<StoredRecord>& records) {
  if (records.empty()) return api::Status::ok();
  if (auto s = exec("BEGIN;"); !s) return s;
  Statement st;
  sqlite3_prepare_v2(db_, "INSERT OR REPLACE INTO workers (id, seq, record) VALUES (?, ?, ?);", -1, &st.stmt,
                     nullptr);
  for (const auto& r : records) {
    const std::string text = r.record.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    sqlite3_reset(st.stmt);
    sqlite3_bind_text(st.stmt, 1, r.id.c_str(), -1, SQLITE_TRANSIENT);
    sqlite3_bind_int64(st.stmt, 2, static_cast<sqlite3_int64>(r.seq));
    sqlite3_bind_text(st.stmt, 3, text.c_str(), static_cast<int>(text.size()), SQLITE_TRANSIENT);
    if (sqlite3_step(st.stmt) != SQLITE_DONE) {
      std::string msg = sqlite3_errmsg(db_);
      (void)exec("ROLLBACK;");
      return api::internal_error("state database: " + msg);
    }
  }
  return exec("COMMIT;");
}

api::Status Store::remove(const std::vector<std::string>& ids) {
  Statement st;
  sqlite3_prepare_v2(db_, "DELETE FROM workers WHERE id = ?;", -1, &st.stmt, nullptr);
  for (const auto& id : ids) {
    sqlite3_reset(st.stmt);
    sqlite3_bind_text(st.stmt, 1, id.c_str(), -1, SQLITE_TRANSIENT);
    if (sqlite3_step(st.stmt) != SQLITE_DONE) return api::internal_error(std::string("state database: ") + sqlite3_errmsg(db_));
  }
  return api::Status::ok();
}

api::Result<std::vector<StoredRecord>> Store::load_all() {
  Statement st;
  if (sqlite3_prepare_v2(db_, "SELECT id, seq, record FROM workers ORDER BY seq;", -1, &st.stmt, nullptr) !=
      SQLITE_OK) {
    return api::internal_error(std::string("state database: ") + sqlite3_errmsg(db_));
  }
  std::vector<StoredRecord> out;
  while (sqlite3_step(st.stmt) == SQLITE_ROW) {
    StoredRecord r;
    r.id = reinterpret_cast<const char*>(sqlite3_column_text(st.stmt, 0));
    r.seq = static_cast<uint64_t>(sqlite3_column_int64(st.stmt, 1));
    const char* text = reinterpret_cast<const char*>(sqlite3_column_text(st.stmt, 2));
    r.record = nlohmann::json::parse(text ? text : "null", nullptr, false);
    if (r.record.is_discarded()) continue;  // a corrupt row is skipped, not fatal
    out.push_back(std::move(r));
  }
  return out;
}

}  // namespace muster::service
