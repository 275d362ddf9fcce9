// SeriesStore: the training curves on disk, so that they survive a daemon
// restart. Its own SQLite file (<state-dir>/training.db) beside the
// daemon's state database: two tables, written only by TrainingSeries.
//
//   series(id, worker_id, cluster_id, rank, name, total_steps)
//          one row per (worker, rank, scalar name); rank -1: not given
//   points(series_id, step, time, value)   one row per kept point (rowid)
//
// TrainingSeries keeps every series in memory as well and writes each
// change here in one transaction per report, so the file holds what memory
// holds (the same bounds: see training_series.h). Calls are serialised by
// an internal mutex; write() runs its body in one transaction and rolls
// back when the body or the COMMIT fails (a full disk), naming the file.
// Opened as the state database is (sqlite_db.h: a file it can only read,
// or one that fails quick_check, is refused).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "api/status.h"
#include "service/sqlite_db.h"

namespace muster::service {

struct StoredPoint {
  int64_t row = 0;  // the point's rowid, for removing it later
  int64_t step = 0;
  double time = 0;
  double value = 0;
};

struct StoredSeries {
  int64_t id = 0;
  std::string worker_id;
  std::string cluster_id;  // "" when none
  int rank = -1;
  std::string name;
  std::optional<int64_t> total_steps;
  std::vector<StoredPoint> points;  // in insertion order
};

class SeriesStore {
 public:
  // Opens (creating) the file; ":memory:" for tests.
  static api::Result<std::unique_ptr<SeriesStore>> open(const std::string& path);
  ~SeriesStore();
  SeriesStore(const SeriesStore&) = delete;
  SeriesStore& operator=(const SeriesStore&) = delete;

  // Every series with its points.
  api::Result<std::vector<StoredSeries>> load();

  // The operations a write() body may call (only there).
  class Writer {
   public:
    api::Result<int64_t> create_series(const std::string& worker_id, const std::string& cluster_id, int rank,
                                       const std::string& name);
    api::Status set_total_steps(int64_t series, int64_t total_steps);
    // The new point's rowid.
    api::Result<int64_t> append(int64_t series, int64_t step, double time, double value);
    api::Status remove_point(int64_t row);
    api::Status remove_series(int64_t series);  // with its points

   private:
    friend class SeriesStore;
    explicit Writer(SeriesStore& store) : store_(store) {}
    api::Status step(sqlite3_stmt* st);
    SeriesStore& store_;
  };
  api::Status write(const std::function<api::Status(Writer&)>& body);

  const std::string& path() const { return path_; }

 private:
  SeriesStore(std::unique_ptr<SqliteDb> db, std::string path);
  api::Status exec(const std::string& sql);
  api::Status prepare();
  api::Status error(const std::string& what) const;

  std::mutex mu_;
  std::unique_ptr<SqliteDb> db_;
  std::string path_;
  sqlite3_stmt* create_ = nullptr;
  sqlite3_stmt* total_ = nullptr;
  sqlite3_stmt* append_ = nullptr;
  sqlite3_stmt* remove_point_ = nullptr;
  sqlite3_stmt* remove_points_of_ = nullptr;
  sqlite3_stmt* remove_series_ = nullptr;
};

}  // namespace muster::service
