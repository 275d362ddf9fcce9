// TrainingSeries: the training scalars runtimes report (step, loss,
// images/s, learning rate, accuracy), kept in memory per worker and per
// cluster for the dashboard's curves, the CSV/JSON downloads and /metrics.
//
// Bounds: at most `max_points` per series (the oldest go first), at most
// `max_series` series (the series updated least recently go first), at most
// `max_batch` points per report and `max_reports_per_second` reports per
// worker (a token bucket; more is answered 429 by the route). Points are
// not persisted: a restarted daemon starts with empty curves.
// Thread-safe; add() never blocks on anything but its own mutex.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "api/status.h"

namespace muster::service {

struct TrainingPoint {
  int64_t step = 0;
  double time = 0;  // seconds since the epoch, when the runtime measured it
  std::optional<double> loss, images_per_sec, lr, accuracy;
};

struct TrainingSeriesOptions {
  size_t max_points = 10000;
  size_t max_series = 1000;
  size_t max_batch = 1000;
  double max_reports_per_second = 20;
};

// Parses {"points": [{"step": 1, "loss": 0.5, ...}, ...]}; errors name the
// field ("points[3].loss must be a finite number").
api::Result<std::vector<TrainingPoint>> parse_training_points(const nlohmann::json& body, size_t max_batch);

nlohmann::json to_json(const TrainingPoint& p);
std::string training_csv(const std::vector<TrainingPoint>& points);

class TrainingSeries {
 public:
  explicit TrainingSeries(TrainingSeriesOptions options = {}) : options_(options) {}

  // False when `worker_id` reported more often than allowed (the caller answers 429).
  bool admit(const std::string& worker_id, std::chrono::steady_clock::time_point now);
  // Appends to the worker's series and, when set, the cluster's.
  void add(const std::string& worker_id, const std::optional<std::string>& cluster_id,
           const std::vector<TrainingPoint>& points);
  std::vector<TrainingPoint> worker(const std::string& id) const;
  std::vector<TrainingPoint> cluster(const std::string& id) const;
  // The newest point of every cluster series (for /metrics).
  std::map<std::string, TrainingPoint> latest_by_cluster() const;
  const TrainingSeriesOptions& options() const { return options_; }

 private:
  struct Series {
    std::deque<TrainingPoint> points;
    uint64_t touched = 0;
  };
  void append(std::map<std::string, Series>& map, const std::string& key, const std::vector<TrainingPoint>& points);

  TrainingSeriesOptions options_;
  mutable std::mutex mu_;
  std::map<std::string, Series> workers_, clusters_;
  struct Bucket {
    double tokens = 0;
    std::chrono::steady_clock::time_point last;
  };
  std::map<std::string, Bucket> buckets_;
  uint64_t clock_ = 0;
};

}  // namespace muster::service
