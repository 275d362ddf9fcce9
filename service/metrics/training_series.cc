#include "service/metrics/training_series.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "api/json_integer.h"

namespace muster::service {

using nlohmann::json;

namespace {
constexpr const char* kScalars[] = {"loss", "images_per_sec", "lr", "accuracy"};

std::optional<double>& scalar(TrainingPoint& p, int i) {
  switch (i) {
    case 0: return p.loss;
    case 1: return p.images_per_sec;
    case 2: return p.lr;
    default: return p.accuracy;
  }
}
const std::optional<double>& scalar(const TrainingPoint& p, int i) { return scalar(const_cast<TrainingPoint&>(p), i); }
}  // namespace

api::Result<std::vector<TrainingPoint>> parse_training_points(const json& body, size_t max_batch) {
  if (!body.is_object() || !body.contains("points") || !body["points"].is_array()) {
    return api::invalid_argument("the body must be {\"points\": [...]}", "points");
  }
  const json& arr = body["points"];
  if (arr.empty()) return api::invalid_argument("points must not be empty", "points");
  if (arr.size() > max_batch) {
    return api::invalid_argument("points holds " + std::to_string(arr.size()) + " points; at most " +
                                     std::to_string(max_batch) + " per report",
                                 "points");
  }
  std::vector<TrainingPoint> out;
  out.reserve(arr.size());
  for (size_t i = 0; i < arr.size(); ++i) {
    const std::string where = "points[" + std::to_string(i) + "]";
    const json& j = arr[i];
    if (!j.is_object()) return api::invalid_argument(where + " must be an object", where);
    for (const auto& [key, value] : j.items()) {
      bool known = key == "step" || key == "time";
      for (const char* s : kScalars) known = known || key == s;
      if (!known) return api::invalid_argument(where + "." + key + " is not a known field", where + "." + key);
    }
    TrainingPoint p;
    // 3.0 is the integer 3, as api/openapi.yaml (JSON Schema) reads it.
    const auto step = j.contains("step") ? api::json_integer(j["step"]) : std::nullopt;
    if (!step || *step < 0) {
      return api::invalid_argument(where + ".step must be an integer >= 0", where + ".step");
    }
    p.step = *step;
    if (j.contains("time")) {
      if (!j["time"].is_number() || !std::isfinite(j["time"].get<double>())) {
        return api::invalid_argument(where + ".time must be a number (seconds since the epoch)", where + ".time");
      }
      p.time = j["time"].get<double>();
    }
    bool any = false;
    for (int s = 0; s < 4; ++s) {
      if (!j.contains(kScalars[s]) || j[kScalars[s]].is_null()) continue;
      const json& v = j[kScalars[s]];
      if (!v.is_number() || !std::isfinite(v.get<double>())) {
        return api::invalid_argument(where + "." + kScalars[s] + " must be a finite number",
                                     where + "." + kScalars[s]);
      }
      scalar(p, s) = v.get<double>();
      any = true;
    }
    if (!any) {
      return api::invalid_argument(where + " has none of loss, images_per_sec, lr, accuracy", where);
    }
    out.push_back(p);
  }
  return out;
}

json to_json(const TrainingPoint& p) {
  json j = {{"step", p.step}, {"time", p.time}};
  for (int s = 0; s < 4; ++s) j[kScalars[s]] = scalar(p, s) ? json(*scalar(p, s)) : json(nullptr);
  return j;
}

std::string training_csv(const std::vector<TrainingPoint>& points) {
  std::string out = "step,time,loss,images_per_sec,lr,accuracy\n";
  char buf[64];
  for (const auto& p : points) {
    out += std::to_string(p.step);
    std::snprintf(buf, sizeof buf, ",%.3f", p.time);
    out += buf;
    for (int s = 0; s < 4; ++s) {
      out += ",";
      if (scalar(p, s)) {
        std::snprintf(buf, sizeof buf, "%.9g", *scalar(p, s));
        out += buf;
      }
    }
    out += "\n";
  }
  return out;
}

bool TrainingSeries::admit(const std::string& worker_id, std::chrono::steady_clock::time_point now) {
  std::lock_guard<std::mutex> lock(mu_);
  const double rate = options_.max_reports_per_second;
  auto [it, fresh] = buckets_.try_emplace(worker_id);
  Bucket& b = it->second;
  if (fresh) {
    b.tokens = rate;  // a full second's worth to start with
  } else {
    const double dt = std::chrono::duration<double>(now - b.last).count();
    b.tokens = std::min(rate, b.tokens + dt * rate);
  }
  b.last = now;
  if (b.tokens < 1) return false;
  b.tokens -= 1;
  if (buckets_.size() > options_.max_series * 2) buckets_.erase(buckets_.begin());
  return true;
}

void TrainingSeries::append(std::map<std::string, Series>& map, const std::string& key,
                            const std::vector<TrainingPoint>& points) {
  if (!map.count(key) && map.size() >= options_.max_series) {
    auto oldest = map.begin();
    for (auto it = map.begin(); it != map.end(); ++it) {
      if (it->second.touched < oldest->second.touched) oldest = it;
    }
    map.erase(oldest);
  }
  Series& s = map[key];
  s.touched = ++clock_;
  for (const auto& p : points) s.points.push_back(p);
  while (s.points.size() > options_.max_points) s.points.pop_front();
}

void TrainingSeries::add(const std::string& worker_id, const std::optional<std::string>& cluster_id,
                         const std::vector<TrainingPoint>& points) {
  std::lock_guard<std::mutex> lock(mu_);
  append(workers_, worker_id, points);
  if (cluster_id) append(clusters_, *cluster_id, points);
}

std::vector<TrainingPoint> TrainingSeries::worker(const std::string& id) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = workers_.find(id);
  if (it == workers_.end()) return {};
  return {it->second.points.begin(), it->second.points.end()};
}

std::vector<TrainingPoint> TrainingSeries::cluster(const std::string& id) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = clusters_.find(id);
  if (it == clusters_.end()) return {};
  return {it->second.points.begin(), it->second.points.end()};
}

std::map<std::string, TrainingPoint> TrainingSeries::latest_by_cluster() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::map<std::string, TrainingPoint> out;
  for (const auto& [id, s] : clusters_) {
    if (!s.points.empty()) out[id] = s.points.back();
  }
  return out;
}

}  // namespace muster::service
