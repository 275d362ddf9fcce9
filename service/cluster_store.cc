#include "muster/service/cluster_store.h"

#include <sqlite3.h>

namespace muster::service {
namespace {

struct Statement {
  sqlite3_stmt* stmt = nullptr;
  ~Statement() { sqlite3_finalize(stmt); }
};

}  // namespace

api::Result<std::unique_ptr<ClusterStore>> ClusterStore::open(const std::string& path) {
  sqlite3* db = nullptr;
  if (sqlite3_open(path.c_str(), &db) != SQLITE_OK) {
    std::string msg = db ? sqlite3_errmsg(db) : "out of memory";
    sqlite3_close(db);
    return api::internal_error("cannot open state database " + path + ": " + msg);
  }
  std::unique_ptr<ClusterStore> store(new ClusterStore(db));
  sqlite3_busy_timeout(db, 5000);
  if (auto s = store->exec(
          "CREATE TABLE IF NOT EXISTS clusters (id TEXT PRIMARY KEY, seq INTEGER NOT NULL, record TEXT NOT NULL);");
      !s) {
    return s;
  }
  return store;
}

ClusterStore::~ClusterStore() { sqlite3_close(db_); }

api::Status ClusterStore::exec(const char* sql) {
  char* err = nullptr;
  if (sqlite3_exec(db_, sql, nullptr, nullptr, &err) != SQLITE_OK) {
    std::string msg = err ? err : "unknown error";
    sqlite3_free(err);
    return api::internal_error("state database (clusters): " + msg);
  }
  return api::Status::ok();
}

api::Status ClusterStore::put(const std::string& id, uint64_t seq, const nlohmann::json& record) {
  std::lock_guard<std::mutex> lock(mu_);
  Statement st;
  if (sqlite3_prepare_v2(db_, "INSERT OR REPLACE INTO clusters (id, seq, record) VALUES (?, ?, ?);", -1, &st.stmt,
                         nullptr) != SQLITE_OK) {
    return api::internal_error(std::string("state database (clusters): ") + sqlite3_errmsg(db_));
  }
  const std::string text = record.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  sqlite3_bind_text(st.stmt, 1, id.c_str(), -1, SQLITE_TRANSIENT);
  sqlite3_bind_int64(st.stmt, 2, static_cast<sqlite3_int64>(seq));
  sqlite3_bind_text(st.stmt, 3, text.c_str(), static_cast<int>(text.size()), SQLITE_TRANSIENT);
  if (sqlite3_step(st.stmt) != SQLITE_DONE) {
    return api::internal_error(std::string("state database (clusters): ") + sqlite3_errmsg(db_));
  }
  return api::Status::ok();
}

api::Result<std::vector<nlohmann::json>> ClusterStore::load_all() {
  std::lock_guard<std::mutex> lock(mu_);
  Statement st;
  if (sqlite3_prepare_v2(db_, "SELECT record FROM clusters ORDER BY seq;", -1, &st.stmt, nullptr) != SQLITE_OK) {
    return api::internal_error(std::string("state database (clusters): ") + sqlite3_errmsg(db_));
  }
  std::vector<nlohmann::json> out;
  while (sqlite3_step(st.stmt) == SQLITE_ROW) {
    const char* text = reinterpret_cast<const char*>(sqlite3_column_text(st.stmt, 0));
    auto record = nlohmann::json::parse(text ? text : "null", nullptr, false);
    if (!record.is_discarded() && record.is_object()) out.push_back(std::move(record));
  }
  return out;
}

}  // namespace muster::service
