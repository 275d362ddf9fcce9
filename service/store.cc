#include "service/store.h"

#include <chrono>

#include <sqlite3.h>

namespace muster::service {

namespace {
// Finalizes a statement when it goes out of scope.
struct Statement {
  sqlite3_stmt* stmt = nullptr;
  ~Statement() { sqlite3_finalize(stmt); }
};
}  // namespace

api::Result<std::unique_ptr<Store>> Store::open(const std::string& path, const std::string& table) {
  sqlite3* db = nullptr;
  if (sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_URI, nullptr) !=
      SQLITE_OK) {
    std::string msg = db ? sqlite3_errmsg(db) : "out of memory";
    sqlite3_close(db);
    return api::internal_error("cannot open state database " + path + ": " + msg);
  }
  std::unique_ptr<Store> store(new Store(db, table));
  sqlite3_busy_timeout(db, 5000);
  if (path != ":memory:" && sqlite3_db_readonly(db, "main") == 1) {
    return api::internal_error("state database " + path +
                               " can only be read (its permissions, or a read-only file system); musterd needs to "
                               "write it: fix that, or give --state-dir another directory");
  }
  if (auto s = store->exec("PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;"); !s) return s;
  {
    Statement check;
    std::string verdict = "no answer";
    if (sqlite3_prepare_v2(db, "PRAGMA quick_check;", -1, &check.stmt, nullptr) == SQLITE_OK &&
        sqlite3_step(check.stmt) == SQLITE_ROW) {
      const char* text = reinterpret_cast<const char*>(sqlite3_column_text(check.stmt, 0));
      verdict = text ? text : "";
    } else {
      verdict = sqlite3_errmsg(db);
    }
    if (verdict != "ok") {
      return api::internal_error("state database " + path + " is damaged (quick_check: " + verdict +
                                 "); restore it from a backup or move it away");
    }
  }
  if (auto s = store->exec("CREATE TABLE IF NOT EXISTS " + table +
                           " (id TEXT PRIMARY KEY, seq INTEGER NOT NULL, record TEXT NOT NULL);");
      !s) {
    return s;
  }
  return store;
}

Store::~Store() { sqlite3_close(db_); }

api::Status Store::error(const std::string& what) const {
  return api::internal_error("state database (" + table_ + "): " + what);
}

api::Status Store::exec(const std::string& sql) {
  char* err = nullptr;
  if (sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, &err) != SQLITE_OK) {
    std::string msg = err ? err : "unknown error";
    sqlite3_free(err);
    return error(msg);
  }
  return api::Status::ok();
}

// Step by step, for put() and remove(): BEGIN; every statement checked
// (bind, step); COMMIT. Any failure, COMMIT's included (a full disk shows up
// there in WAL mode), rolls the transaction back, so the table holds either
// every row of the call or none, and the error names the table.
api::Status Store::put(const std::vector<StoredRecord>& records) {
  if (records.empty()) return api::Status::ok();
  const auto start = std::chrono::steady_clock::now();
  auto s = put_unobserved(records);
  if (write_observer_) write_observer_(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  return reported(std::move(s));
}

api::Status Store::reported(api::Status s) {
  if (health_) {
    if (s) {
      health_->succeeded();
    } else {
      health_->failed(s.message());
    }
  }
  return s;
}

api::Status Store::put_unobserved(const std::vector<StoredRecord>& records) {
  std::lock_guard<std::mutex> lock(mu_);
  Statement st;
  const std::string sql = "INSERT OR REPLACE INTO " + table_ + " (id, seq, record) VALUES (?, ?, ?);";
  if (sqlite3_prepare_v2(db_, sql.c_str(), -1, &st.stmt, nullptr) != SQLITE_OK) return error(sqlite3_errmsg(db_));
  return in_transaction([&]() -> api::Status {
    for (const auto& r : records) {
      const std::string text = r.record.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
      sqlite3_reset(st.stmt);
      if (sqlite3_bind_text(st.stmt, 1, r.id.c_str(), -1, SQLITE_TRANSIENT) != SQLITE_OK ||
          sqlite3_bind_int64(st.stmt, 2, static_cast<sqlite3_int64>(r.seq)) != SQLITE_OK ||
          sqlite3_bind_text(st.stmt, 3, text.c_str(), static_cast<int>(text.size()), SQLITE_TRANSIENT) != SQLITE_OK ||
          sqlite3_step(st.stmt) != SQLITE_DONE) {
        return error("cannot write " + r.id + ": " + sqlite3_errmsg(db_));
      }
    }
    return api::Status::ok();
  });
}

api::Status Store::remove(const std::vector<std::string>& ids) {
  if (ids.empty()) return api::Status::ok();
  std::lock_guard<std::mutex> lock(mu_);
  Statement st;
  const std::string sql = "DELETE FROM " + table_ + " WHERE id = ?;";
  if (sqlite3_prepare_v2(db_, sql.c_str(), -1, &st.stmt, nullptr) != SQLITE_OK) {
    return reported(error(sqlite3_errmsg(db_)));
  }
  return reported(in_transaction([&]() -> api::Status {
    for (const auto& id : ids) {
      sqlite3_reset(st.stmt);
      if (sqlite3_bind_text(st.stmt, 1, id.c_str(), -1, SQLITE_TRANSIENT) != SQLITE_OK ||
          sqlite3_step(st.stmt) != SQLITE_DONE) {
        return error("cannot remove " + id + ": " + sqlite3_errmsg(db_));
      }
    }
    return api::Status::ok();
  }));
}

api::Status Store::in_transaction(const std::function<api::Status()>& body) {
  if (auto s = exec("BEGIN IMMEDIATE;"); !s) return s;
  api::Status s = body();
  if (s) s = exec("COMMIT;");
  if (!s && !sqlite3_get_autocommit(db_)) {
    if (auto rolled = exec("ROLLBACK;"); !rolled) {
      return error(s.message() + "; the rollback failed too: " + rolled.message());
    }
  }
  return s;
}

api::Result<std::vector<StoredRecord>> Store::load_all(std::vector<std::string>* skipped) {
  std::lock_guard<std::mutex> lock(mu_);
  Statement st;
  const std::string sql = "SELECT id, seq, record FROM " + table_ + " ORDER BY seq;";
  if (sqlite3_prepare_v2(db_, sql.c_str(), -1, &st.stmt, nullptr) != SQLITE_OK) return error(sqlite3_errmsg(db_));
  std::vector<StoredRecord> out;
  int rc;
  while ((rc = sqlite3_step(st.stmt)) == SQLITE_ROW) {
    StoredRecord r;
    const char* id = reinterpret_cast<const char*>(sqlite3_column_text(st.stmt, 0));
    r.id = id ? id : "";
    r.seq = static_cast<uint64_t>(sqlite3_column_int64(st.stmt, 1));
    const char* text = reinterpret_cast<const char*>(sqlite3_column_text(st.stmt, 2));
    r.record = nlohmann::json::parse(text ? text : "null", nullptr, false);
    if (r.record.is_discarded()) {  // a garbled row is skipped, not fatal, and said
      if (skipped) skipped->push_back((r.id.empty() ? "(no id)" : r.id) + ": its record is not JSON");
      continue;
    }
    out.push_back(std::move(r));
  }
  if (rc != SQLITE_DONE) return error(std::string("cannot read: ") + sqlite3_errmsg(db_));
  return out;
}

}  // namespace muster::service
