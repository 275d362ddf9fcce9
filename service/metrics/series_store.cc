#include "service/metrics/series_store.h"

#include <map>

#include <sqlite3.h>

namespace muster::service {

namespace {

constexpr const char* kSchema =
    "CREATE TABLE IF NOT EXISTS series (id INTEGER PRIMARY KEY, worker_id TEXT NOT NULL, cluster_id TEXT NOT NULL,"
    " rank INTEGER NOT NULL, name TEXT NOT NULL, total_steps INTEGER, UNIQUE (worker_id, rank, name));"
    "CREATE TABLE IF NOT EXISTS points (series_id INTEGER NOT NULL, step INTEGER NOT NULL, time REAL NOT NULL,"
    " value REAL NOT NULL);"
    "CREATE INDEX IF NOT EXISTS points_of_series ON points (series_id);";

std::string text_of(sqlite3_stmt* st, int col) {
  const unsigned char* t = sqlite3_column_text(st, col);
  return t ? reinterpret_cast<const char*>(t) : "";
}

}  // namespace

api::Result<std::unique_ptr<SeriesStore>> SeriesStore::open(const std::string& path) {
  auto db = SqliteDb::open(path, "training curves' database");
  if (!db) return db.status();
  std::unique_ptr<SeriesStore> store(new SeriesStore(std::move(*db), path));
  if (auto s = store->exec(kSchema); !s) return s;
  if (auto s = store->prepare(); !s) return s;
  return store;
}

SeriesStore::SeriesStore(std::unique_ptr<SqliteDb> db, std::string path) : db_(std::move(db)), path_(std::move(path)) {}

SeriesStore::~SeriesStore() {
  for (sqlite3_stmt* st : {create_, total_, append_, remove_point_, remove_points_of_, remove_series_}) {
    sqlite3_finalize(st);
  }
}

api::Status SeriesStore::error(const std::string& what) const {
  return api::internal_error("training curves' database " + path_ + ": " + what);
}

api::Status SeriesStore::exec(const std::string& sql) {
  if (auto s = db_->exec(sql); !s) return error(s.message());
  return api::Status::ok();
}

api::Status SeriesStore::prepare() {
  const std::pair<sqlite3_stmt**, const char*> statements[] = {
      {&create_, "INSERT INTO series (worker_id, cluster_id, rank, name) VALUES (?, ?, ?, ?);"},
      {&total_, "UPDATE series SET total_steps = ? WHERE id = ?;"},
      {&append_, "INSERT INTO points (series_id, step, time, value) VALUES (?, ?, ?, ?);"},
      {&remove_point_, "DELETE FROM points WHERE rowid = ?;"},
      {&remove_points_of_, "DELETE FROM points WHERE series_id = ?;"},
      {&remove_series_, "DELETE FROM series WHERE id = ?;"}};
  for (const auto& [st, sql] : statements) {
    if (sqlite3_prepare_v2(db_->handle(), sql, -1, st, nullptr) != SQLITE_OK) return error(db_->last_message());
  }
  return api::Status::ok();
}

api::Result<std::vector<StoredSeries>> SeriesStore::load() {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<StoredSeries> out;
  std::map<int64_t, size_t> index;
  {
    Statement st;
    const char* sql = "SELECT id, worker_id, cluster_id, rank, name, total_steps FROM series ORDER BY id;";
    if (sqlite3_prepare_v2(db_->handle(), sql, -1, &st.stmt, nullptr) != SQLITE_OK) return error(db_->last_message());
    while (sqlite3_step(st.stmt) == SQLITE_ROW) {
      StoredSeries s;
      s.id = sqlite3_column_int64(st.stmt, 0);
      s.worker_id = text_of(st.stmt, 1);
      s.cluster_id = text_of(st.stmt, 2);
      s.rank = sqlite3_column_int(st.stmt, 3);
      s.name = text_of(st.stmt, 4);
      if (sqlite3_column_type(st.stmt, 5) != SQLITE_NULL) s.total_steps = sqlite3_column_int64(st.stmt, 5);
      index[s.id] = out.size();
      out.push_back(std::move(s));
    }
  }
  Statement st;
  const char* sql = "SELECT rowid, series_id, step, time, value FROM points ORDER BY rowid;";
  if (sqlite3_prepare_v2(db_->handle(), sql, -1, &st.stmt, nullptr) != SQLITE_OK) return error(db_->last_message());
  int rc;
  while ((rc = sqlite3_step(st.stmt)) == SQLITE_ROW) {
    auto it = index.find(sqlite3_column_int64(st.stmt, 1));
    if (it == index.end()) continue;  // a point of a removed series
    out[it->second].points.push_back({sqlite3_column_int64(st.stmt, 0), sqlite3_column_int64(st.stmt, 2),
                                      sqlite3_column_double(st.stmt, 3), sqlite3_column_double(st.stmt, 4)});
  }
  if (rc != SQLITE_DONE) return error(db_->last_message());
  return out;
}

api::Status SeriesStore::Writer::step(sqlite3_stmt* st) {
  const int rc = sqlite3_step(st);
  sqlite3_reset(st);
  sqlite3_clear_bindings(st);
  if (rc != SQLITE_DONE) return store_.error(store_.db_->last_message());
  return api::Status::ok();
}

api::Result<int64_t> SeriesStore::Writer::create_series(const std::string& worker_id, const std::string& cluster_id,
                                                       int rank, const std::string& name) {
  sqlite3_stmt* st = store_.create_;
  sqlite3_bind_text(st, 1, worker_id.c_str(), -1, SQLITE_TRANSIENT);
  sqlite3_bind_text(st, 2, cluster_id.c_str(), -1, SQLITE_TRANSIENT);
  sqlite3_bind_int(st, 3, rank);
  sqlite3_bind_text(st, 4, name.c_str(), -1, SQLITE_TRANSIENT);
  if (auto s = step(st); !s) return s;
  return static_cast<int64_t>(sqlite3_last_insert_rowid(store_.db_->handle()));
}

api::Status SeriesStore::Writer::set_total_steps(int64_t series, int64_t total_steps) {
  sqlite3_stmt* st = store_.total_;
  sqlite3_bind_int64(st, 1, total_steps);
  sqlite3_bind_int64(st, 2, series);
  return step(st);
}

api::Result<int64_t> SeriesStore::Writer::append(int64_t series, int64_t step_number, double time, double value) {
  sqlite3_stmt* st = store_.append_;
  sqlite3_bind_int64(st, 1, series);
  sqlite3_bind_int64(st, 2, step_number);
  sqlite3_bind_double(st, 3, time);
  sqlite3_bind_double(st, 4, value);
  if (auto s = step(st); !s) return s;
  return static_cast<int64_t>(sqlite3_last_insert_rowid(store_.db_->handle()));
}

api::Status SeriesStore::Writer::remove_point(int64_t row) {
  sqlite3_stmt* st = store_.remove_point_;
  sqlite3_bind_int64(st, 1, row);
  return step(st);
}

api::Status SeriesStore::Writer::remove_series(int64_t series) {
  sqlite3_bind_int64(store_.remove_points_of_, 1, series);
  if (auto s = step(store_.remove_points_of_); !s) return s;
  sqlite3_bind_int64(store_.remove_series_, 1, series);
  return step(store_.remove_series_);
}

// The body's statements inside one transaction (SqliteDb::in_transaction):
// a failure anywhere, COMMIT included, rolls back. The body's errors already
// name the file; BEGIN's and COMMIT's are named here.
api::Status SeriesStore::write(const std::function<api::Status(Writer&)>& body) {
  std::lock_guard<std::mutex> lock(mu_);
  Writer w(*this);
  bool body_failed = false;
  api::Status s = db_->in_transaction([&] {
    api::Status b = body(w);
    body_failed = !b;
    return b;
  });
  if (!s && !body_failed) return error(s.message());
  return s;
}

}  // namespace muster::service
