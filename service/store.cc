#include "service/store.h"

#include <chrono>

#include <sqlite3.h>

namespace muster::service {


api::Result<std::unique_ptr<Store>> Store::open(const std::string& path, const std::string& table) {
  auto db = SqliteDb::open(path, "state database");
  if (!db) return db.status();
  std::unique_ptr<Store> store(new Store(std::move(*db), table));
  if (auto s = store->exec("CREATE TABLE IF NOT EXISTS " + table +
                           " (id TEXT PRIMARY KEY, seq INTEGER NOT NULL, record TEXT NOT NULL);");
      !s) {
    return s;
  }
  return store;
}

Store::Store(std::unique_ptr<SqliteDb> db, std::string table) : db_(std::move(db)), table_(std::move(table)) {}
Store::~Store() = default;

api::Status Store::error(const std::string& what) const {
  return api::internal_error("state database (" + table_ + "): " + what);
}

api::Status Store::exec(const std::string& sql) {
  if (auto s = db_->exec(sql); !s) return error(s.message());
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
  if (sqlite3_prepare_v2(db_->handle(), sql.c_str(), -1, &st.stmt, nullptr) != SQLITE_OK) {
    return error(db_->last_message());
  }
  return in_transaction([&]() -> api::Status {
    for (const auto& r : records) {
      const std::string text = r.record.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
      sqlite3_reset(st.stmt);
      if (sqlite3_bind_text(st.stmt, 1, r.id.c_str(), -1, SQLITE_TRANSIENT) != SQLITE_OK ||
          sqlite3_bind_int64(st.stmt, 2, static_cast<sqlite3_int64>(r.seq)) != SQLITE_OK ||
          sqlite3_bind_text(st.stmt, 3, text.c_str(), static_cast<int>(text.size()), SQLITE_TRANSIENT) != SQLITE_OK ||
          sqlite3_step(st.stmt) != SQLITE_DONE) {
        return error("cannot write " + r.id + ": " + db_->last_message());
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
  if (sqlite3_prepare_v2(db_->handle(), sql.c_str(), -1, &st.stmt, nullptr) != SQLITE_OK) {
    return reported(error(db_->last_message()));
  }
  return reported(in_transaction([&]() -> api::Status {
    for (const auto& id : ids) {
      sqlite3_reset(st.stmt);
      if (sqlite3_bind_text(st.stmt, 1, id.c_str(), -1, SQLITE_TRANSIENT) != SQLITE_OK ||
          sqlite3_step(st.stmt) != SQLITE_DONE) {
        return error("cannot remove " + id + ": " + db_->last_message());
      }
    }
    return api::Status::ok();
  }));
}

// The body's errors already name the table; BEGIN's and COMMIT's are named here.
api::Status Store::in_transaction(const std::function<api::Status()>& body) {
  bool body_failed = false;
  api::Status s = db_->in_transaction([&] {
    api::Status b = body();
    body_failed = !b;
    return b;
  });
  if (!s && !body_failed) return error(s.message());
  return s;
}

api::Result<std::vector<StoredRecord>> Store::load_all(std::vector<std::string>* skipped) {
  std::lock_guard<std::mutex> lock(mu_);
  Statement st;
  const std::string sql = "SELECT id, seq, record FROM " + table_ + " ORDER BY seq;";
  if (sqlite3_prepare_v2(db_->handle(), sql.c_str(), -1, &st.stmt, nullptr) != SQLITE_OK) {
    return error(db_->last_message());
  }
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
  if (rc != SQLITE_DONE) return error(std::string("cannot read: ") + db_->last_message());
  return out;
}

}  // namespace muster::service
