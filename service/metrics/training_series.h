// TrainingSeries: the training scalars runtimes report, one series per
// (worker, rank, scalar name), for the dashboard's curves (one line per
// worker or rank), the CSV/JSON downloads and /metrics.
//
// A report (POST /api/v1/agent/workers/{id}/metrics) is a batch of points
// (training_point.h: what a point holds, how it is read and shown).
//
// Bounds (memory and the SeriesStore alike):
// - at most `max_points` points per series: when a series is full, every
//   other point of it is dropped (the first and the newest stay), so a
//   series always spans the whole run, densest where it is newest;
// - at most `max_series` series: a new one evicts the series updated least
//   recently;
// - at most `max_names` scalar names per worker (400 naming the field
//   beyond), names of 1..64 characters of [A-Za-z0-9 _./:()-];
// - at most `max_batch` points per report and `max_reports_per_second`
//   reports per worker and rank (a token bucket; 429 beyond, by the route).
// With a SeriesStore every change is written there in one transaction per
// report, and restore() brings the series back after a restart; a store
// that fails keeps the points in memory and reports the error (the route
// logs it once per episode).
// Thread-safe; add() blocks only on its own mutex and the store's write.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <tuple>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "api/status.h"
#include "service/metrics/series_store.h"
#include "service/metrics/training_point.h"

namespace muster::service {

struct TrainingSeriesOptions {
  size_t max_points = 1000;
  size_t max_series = 1000;
  size_t max_names = 64;
  size_t max_batch = 1000;
  double max_reports_per_second = 20;
};

class TrainingSeries {
 public:
  // `store` may be null (memory only); it must outlive this.
  explicit TrainingSeries(TrainingSeriesOptions options = {}, SeriesStore* store = nullptr)
      : options_(options), store_(store) {}

  // Loads the store's series (bounded as above).
  api::Status restore();

  // False when `key` (worker id, or worker id and rank) reported more often than allowed.
  bool admit(const std::string& key, std::chrono::steady_clock::time_point now);
  // Appends to the worker's series. invalid_argument (nothing added) for a
  // scalar name past max_names; an internal error when the store failed
  // (the points are kept in memory all the same).
  api::Status add(const std::string& worker_id, const std::optional<std::string>& cluster_id,
                  const std::vector<TrainingPoint>& points);
  std::vector<ScalarSeries> worker_series(const std::string& id) const;
  std::vector<ScalarSeries> cluster_series(const std::string& id) const;
  // Rows of the above (training_rows), for the classic `points` list.
  std::vector<TrainingPoint> worker(const std::string& id) const { return training_rows(worker_series(id)); }
  std::vector<TrainingPoint> cluster(const std::string& id) const { return training_rows(cluster_series(id)); }
  // The newest step and classic scalars of every cluster (for /metrics).
  std::map<std::string, TrainingPoint> latest_by_cluster() const;
  const TrainingSeriesOptions& options() const { return options_; }
  size_t series_count() const;

 private:
  struct Key {
    std::string worker_id;
    int rank;  // -1: none
    std::string name;
    bool operator<(const Key& o) const {
      return std::tie(worker_id, rank, name) < std::tie(o.worker_id, o.rank, o.name);
    }
  };
  struct Series {
    int64_t id = 0;  // in the store (0: none)
    std::string cluster_id;
    std::optional<int64_t> total_steps;
    std::vector<StoredPoint> points;
    uint64_t touched = 0;
  };
  std::vector<ScalarSeries> select(const std::function<bool(const Key&, const Series&)>& which) const;
  // Under mu_: drops every other point of a full series.
  void thin(Series& s, std::vector<int64_t>& removed_rows);

  TrainingSeriesOptions options_;
  SeriesStore* store_;
  mutable std::mutex mu_;
  std::map<Key, Series> series_;
  std::map<std::string, std::set<std::string>> names_;  // per worker, for max_names
  int64_t committed_row_ = 0, committed_series_ = 0;     // the newest ids the store has committed
  struct Bucket {
    double tokens = 0;
    std::chrono::steady_clock::time_point last;
  };
  std::map<std::string, Bucket> buckets_;
  uint64_t clock_ = 0;
};

}  // namespace muster::service
