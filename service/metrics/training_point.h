// TrainingPoint: one point of the training scalars a runtime reports, and
// the forms it takes on the way in and out: read from a report's body
// (parse_training_points), shown in the event stream and the GET routes
// (to_json), and as rows and CSV (training_rows, training_csv) of the
// series TrainingSeries (training_series.h) keeps.
//
// A report (POST /api/v1/agent/workers/{id}/metrics) is a batch of points:
// a step, the four classic scalars (loss, images_per_sec, lr, accuracy)
// and any other scalar by name (`scalars`: what SummaryWriter.add_scalar
// sends), optionally the reporting rank (in mpi clusters every rank reports
// through worker 0's id) and the run's total steps (for an ETA). A classic
// scalar named in `scalars` is the classic one; a point holds at least one
// scalar. Scalar names are 1..64 characters of [A-Za-z0-9 _./:()-], not at
// either end a space.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "api/status.h"

namespace muster::service {

// One reported point.
struct TrainingPoint {
  int64_t step = 0;
  double time = 0;  // seconds since the epoch, when the runtime measured it
  std::optional<double> loss, images_per_sec, lr, accuracy;
  std::optional<int> rank;               // 0..65535; in mpi clusters every rank reports through worker 0
  std::optional<int64_t> total_steps;    // the step the run ends at, when known
  std::map<std::string, double> scalars; // any other scalar, by name
  std::string worker_id;                 // who reported it (rows and events; not in a report's body)
};

// One curve.
struct ScalarSeries {
  std::string worker_id;
  std::string cluster_id;  // "" when none
  std::optional<int> rank;
  std::string name;
  std::optional<int64_t> total_steps;
  struct Point {
    int64_t step;
    double time;
    double value;
  };
  std::vector<Point> points;  // oldest first
};

// Parses {"points": [{"step": 1, "loss": 0.5, "scalars": {"Train/Loss": 0.5}, ...}, ...]};
// errors name the field ("points[3].loss must be a finite number").
api::Result<std::vector<TrainingPoint>> parse_training_points(const nlohmann::json& body, size_t max_batch);
bool valid_scalar_name(const std::string& name);

// A point as the event stream and the `points` list of the GET routes show it.
nlohmann::json to_json(const TrainingPoint& p);
nlohmann::json to_json(const ScalarSeries& s);
// Rows of (worker, rank, step, time) with every scalar as a column: the four
// classic ones first, then the others by name; oldest first.
std::vector<TrainingPoint> training_rows(const std::vector<ScalarSeries>& series);
std::string training_csv(const std::vector<ScalarSeries>& series);

// The classic scalars, in their column order, and a point's by index
// (0..3); classic_index: a name's index, -1 for any other.
inline constexpr const char* kClassicScalars[] = {"loss", "images_per_sec", "lr", "accuracy"};
std::optional<double>& classic_scalar(TrainingPoint& p, int index);
const std::optional<double>& classic_scalar(const TrainingPoint& p, int index);
int classic_index(const std::string& name);
// Every (name, value) of a point: the classic ones, then the others by name.
std::vector<std::pair<std::string, double>> scalar_values(const TrainingPoint& p);

}  // namespace muster::service
