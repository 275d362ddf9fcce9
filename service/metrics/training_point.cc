#include "service/metrics/training_point.h"

#include <cmath>
#include <cstdio>
#include <set>
#include <tuple>

#include "api/json_integer.h"

namespace muster::service {

using nlohmann::json;

namespace {

constexpr size_t kMaxNameLength = 64;
constexpr int kMaxRank = 65535;

std::optional<double> finite(const json& v) {
  if (!v.is_number()) return std::nullopt;
  const double d = v.get<double>();
  if (!std::isfinite(d)) return std::nullopt;
  return d;
}

std::string csv_number(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.9g", v);
  return buf;
}

}  // namespace

std::optional<double>& classic_scalar(TrainingPoint& p, int i) {
  switch (i) {
    case 0: return p.loss;
    case 1: return p.images_per_sec;
    case 2: return p.lr;
    default: return p.accuracy;
  }
}
const std::optional<double>& classic_scalar(const TrainingPoint& p, int i) {
  return classic_scalar(const_cast<TrainingPoint&>(p), i);
}

int classic_index(const std::string& name) {
  for (int i = 0; i < 4; ++i) {
    if (name == kClassicScalars[i]) return i;
  }
  return -1;
}

std::vector<std::pair<std::string, double>> scalar_values(const TrainingPoint& p) {
  std::vector<std::pair<std::string, double>> out;
  for (int i = 0; i < 4; ++i) {
    if (classic_scalar(p, i)) out.emplace_back(kClassicScalars[i], *classic_scalar(p, i));
  }
  for (const auto& [name, v] : p.scalars) out.emplace_back(name, v);
  return out;
}

bool valid_scalar_name(const std::string& name) {
  if (name.empty() || name.size() > kMaxNameLength || name.front() == ' ' || name.back() == ' ') return false;
  for (char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == ' ' ||
                    c == '_' || c == '.' || c == '/' || c == ':' || c == '(' || c == ')' || c == '-';
    if (!ok) return false;
  }
  return true;
}

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
      const bool known = key == "step" || key == "time" || key == "rank" || key == "total_steps" ||
                         key == "scalars" || classic_index(key) >= 0;
      if (!known) {
        return api::invalid_argument(where + "." + key + " is not a known field (other scalars go in " + where +
                                         ".scalars)",
                                     where + "." + key);
      }
    }
    TrainingPoint p;
    // 3.0 is the integer 3, as api/openapi.yaml (JSON Schema) reads it.
    const auto step = j.contains("step") ? api::json_integer(j["step"]) : std::nullopt;
    if (!step || *step < 0) {
      return api::invalid_argument(where + ".step must be an integer >= 0", where + ".step");
    }
    p.step = *step;
    if (j.contains("time")) {
      auto t = finite(j["time"]);
      if (!t) return api::invalid_argument(where + ".time must be a number (seconds since the epoch)", where + ".time");
      p.time = *t;
    }
    if (j.contains("rank") && !j["rank"].is_null()) {
      const auto rank = api::json_integer(j["rank"]);
      if (!rank || *rank < 0 || *rank > kMaxRank) {
        return api::invalid_argument(where + ".rank must be an integer in 0..65535", where + ".rank");
      }
      p.rank = static_cast<int>(*rank);
    }
    if (j.contains("total_steps") && !j["total_steps"].is_null()) {
      const auto total = api::json_integer(j["total_steps"]);
      if (!total || *total < 1) {
        return api::invalid_argument(where + ".total_steps must be an integer >= 1", where + ".total_steps");
      }
      p.total_steps = *total;
    }
    for (int s = 0; s < 4; ++s) {
      if (!j.contains(kClassicScalars[s]) || j[kClassicScalars[s]].is_null()) continue;
      auto v = finite(j[kClassicScalars[s]]);
      if (!v) {
        return api::invalid_argument(where + "." + kClassicScalars[s] + " must be a finite number",
                                     where + "." + kClassicScalars[s]);
      }
      classic_scalar(p, s) = *v;
    }
    if (j.contains("scalars") && !j["scalars"].is_null()) {
      const json& scalars = j["scalars"];
      if (!scalars.is_object()) {
        return api::invalid_argument(where + ".scalars must be an object of name: number", where + ".scalars");
      }
      for (const auto& [name, value] : scalars.items()) {
        const std::string field = where + ".scalars." + name;
        if (!valid_scalar_name(name)) {
          return api::invalid_argument(field + ": a scalar name is 1..64 characters of letters, digits, space and " +
                                           "_ . / : ( ) - (not at either end a space)",
                                       field);
        }
        auto v = finite(value);
        if (!v) return api::invalid_argument(field + " must be a finite number", field);
        if (const int c = classic_index(name); c >= 0) {
          classic_scalar(p, c) = *v;  // the same scalar as the top-level field
        } else {
          p.scalars[name] = *v;
        }
      }
    }
    if (scalar_values(p).empty()) {
      return api::invalid_argument(where + " has no scalar: give loss, images_per_sec, lr, accuracy or scalars", where);
    }
    out.push_back(std::move(p));
  }
  return out;
}

json to_json(const TrainingPoint& p) {
  json j = {{"step", p.step}, {"time", p.time}};
  for (int s = 0; s < 4; ++s) {
    j[kClassicScalars[s]] = classic_scalar(p, s) ? json(*classic_scalar(p, s)) : json(nullptr);
  }
  j["rank"] = p.rank ? json(*p.rank) : json(nullptr);
  j["total_steps"] = p.total_steps ? json(*p.total_steps) : json(nullptr);
  j["worker_id"] = p.worker_id;
  j["scalars"] = json::object();
  for (const auto& [name, v] : p.scalars) j["scalars"][name] = v;
  return j;
}

json to_json(const ScalarSeries& s) {
  json points = json::array();
  for (const auto& p : s.points) points.push_back(json::array({p.step, p.value, p.time}));
  return {{"worker_id", s.worker_id},
          {"cluster_id", s.cluster_id.empty() ? json(nullptr) : json(s.cluster_id)},
          {"rank", s.rank ? json(*s.rank) : json(nullptr)},
          {"name", s.name},
          {"total_steps", s.total_steps ? json(*s.total_steps) : json(nullptr)},
          {"points", points}};
}

std::vector<TrainingPoint> training_rows(const std::vector<ScalarSeries>& series) {
  // (time, step, worker, rank) -> row, so rows come out oldest first.
  std::map<std::tuple<double, int64_t, std::string, int>, TrainingPoint> rows;
  for (const auto& s : series) {
    for (const auto& p : s.points) {
      TrainingPoint& row = rows[{p.time, p.step, s.worker_id, s.rank.value_or(-1)}];
      row.step = p.step;
      row.time = p.time;
      row.rank = s.rank;
      row.worker_id = s.worker_id;
      row.total_steps = s.total_steps;
      if (const int c = classic_index(s.name); c >= 0) {
        classic_scalar(row, c) = p.value;
      } else {
        row.scalars[s.name] = p.value;
      }
    }
  }
  std::vector<TrainingPoint> out;
  out.reserve(rows.size());
  for (auto& [key, row] : rows) out.push_back(std::move(row));
  return out;
}

std::string training_csv(const std::vector<ScalarSeries>& series) {
  std::set<std::string> others;
  for (const auto& s : series) {
    if (classic_index(s.name) < 0) others.insert(s.name);
  }
  std::string out = "step,time,loss,images_per_sec,lr,accuracy,worker,rank";
  for (const auto& name : others) out += "," + name;  // names hold no comma or quote
  out += "\n";
  char buf[64];
  for (const auto& row : training_rows(series)) {
    out += std::to_string(row.step);
    std::snprintf(buf, sizeof buf, ",%.3f", row.time);
    out += buf;
    for (int s = 0; s < 4; ++s) {
      out += "," + (classic_scalar(row, s) ? csv_number(*classic_scalar(row, s)) : std::string());
    }
    out += "," + row.worker_id + "," + (row.rank ? std::to_string(*row.rank) : std::string());
    for (const auto& name : others) {
      auto it = row.scalars.find(name);
      out += "," + (it == row.scalars.end() ? std::string() : csv_number(it->second));
    }
    out += "\n";
  }
  return out;
}

}  // namespace muster::service
