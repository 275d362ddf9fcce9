#include "service/metrics/training_series.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "api/json_integer.h"

namespace muster::service {

using nlohmann::json;

namespace {

constexpr const char* kClassic[] = {"loss", "images_per_sec", "lr", "accuracy"};
constexpr size_t kMaxNameLength = 64;
constexpr int kMaxRank = 65535;

std::optional<double>& classic(TrainingPoint& p, int i) {
  switch (i) {
    case 0: return p.loss;
    case 1: return p.images_per_sec;
    case 2: return p.lr;
    default: return p.accuracy;
  }
}
const std::optional<double>& classic(const TrainingPoint& p, int i) { return classic(const_cast<TrainingPoint&>(p), i); }

int classic_index(const std::string& name) {
  for (int i = 0; i < 4; ++i) {
    if (name == kClassic[i]) return i;
  }
  return -1;
}

// Every (name, value) of a point: the classic ones, then the others.
std::vector<std::pair<std::string, double>> values_of(const TrainingPoint& p) {
  std::vector<std::pair<std::string, double>> out;
  for (int i = 0; i < 4; ++i) {
    if (classic(p, i)) out.emplace_back(kClassic[i], *classic(p, i));
  }
  for (const auto& [name, v] : p.scalars) out.emplace_back(name, v);
  return out;
}

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
      if (!j.contains(kClassic[s]) || j[kClassic[s]].is_null()) continue;
      auto v = finite(j[kClassic[s]]);
      if (!v) {
        return api::invalid_argument(where + "." + kClassic[s] + " must be a finite number",
                                     where + "." + kClassic[s]);
      }
      classic(p, s) = *v;
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
          classic(p, c) = *v;  // the same scalar as the top-level field
        } else {
          p.scalars[name] = *v;
        }
      }
    }
    if (values_of(p).empty()) {
      return api::invalid_argument(where + " has no scalar: give loss, images_per_sec, lr, accuracy or scalars", where);
    }
    out.push_back(std::move(p));
  }
  return out;
}

json to_json(const TrainingPoint& p) {
  json j = {{"step", p.step}, {"time", p.time}};
  for (int s = 0; s < 4; ++s) j[kClassic[s]] = classic(p, s) ? json(*classic(p, s)) : json(nullptr);
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
        classic(row, c) = p.value;
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
    for (int s = 0; s < 4; ++s) out += "," + (classic(row, s) ? csv_number(*classic(row, s)) : std::string());
    out += "," + row.worker_id + "," + (row.rank ? std::to_string(*row.rank) : std::string());
    for (const auto& name : others) {
      auto it = row.scalars.find(name);
      out += "," + (it == row.scalars.end() ? std::string() : csv_number(it->second));
    }
    out += "\n";
  }
  return out;
}

bool TrainingSeries::admit(const std::string& key, std::chrono::steady_clock::time_point now) {
  std::lock_guard<std::mutex> lock(mu_);
  const double rate = options_.max_reports_per_second;
  auto [it, fresh] = buckets_.try_emplace(key);
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

void TrainingSeries::thin(Series& s, std::vector<int64_t>& removed_rows) {
  if (s.points.size() < options_.max_points || s.points.size() < 3) return;
  std::vector<StoredPoint> kept;
  kept.reserve(s.points.size() / 2 + 2);
  const size_t last = s.points.size() - 1;
  for (size_t i = 0; i < last; ++i) {
    if (i % 2 == 0) {
      kept.push_back(s.points[i]);
    } else if (s.points[i].row != 0) {
      removed_rows.push_back(s.points[i].row);
    }
  }
  kept.push_back(s.points[last]);
  s.points = std::move(kept);
}

// Step by step, under mu_:
//  a) every scalar name of the batch is checked against the worker's
//     max_names before anything changes (400: nothing added);
//  b) inside one store transaction (or none without a store): each value
//     goes to its series, created on first use (evicting the series updated
//     least recently when max_series exist); a full series is thinned;
//  c) a failed transaction leaves the points in memory without store rows,
//     so no later removal can touch a row it does not own.
api::Status TrainingSeries::add(const std::string& worker_id, const std::optional<std::string>& cluster_id,
                                const std::vector<TrainingPoint>& points) {
  std::lock_guard<std::mutex> lock(mu_);
  std::set<std::string> names = names_[worker_id];
  for (size_t i = 0; i < points.size(); ++i) {
    for (const auto& [name, v] : values_of(points[i])) {
      if (!names.insert(name).second || names.size() <= options_.max_names) continue;
      const std::string where =
          "points[" + std::to_string(i) + "]" + (classic_index(name) >= 0 ? "." + name : ".scalars." + name);
      return api::invalid_argument("worker " + worker_id + " would report more than " +
                                       std::to_string(options_.max_names) + " scalar names with " + where +
                                       "; report fewer names (the curves are kept per name)",
                                   where);
    }
  }
  names_[worker_id] = std::move(names);
  std::vector<Key> touched;
  auto apply = [&](SeriesStore::Writer* w) -> api::Status {
    for (const auto& p : points) {
      for (const auto& [name, value] : values_of(p)) {
        Key key{worker_id, p.rank.value_or(-1), name};
        auto it = series_.find(key);
        if (it == series_.end()) {
          if (series_.size() >= options_.max_series) {
            auto oldest = std::min_element(series_.begin(), series_.end(), [](const auto& a, const auto& b) {
              return a.second.touched < b.second.touched;
            });
            if (w && oldest->second.id != 0) {
              if (auto s = w->remove_series(oldest->second.id); !s) return s;
            }
            const Key gone = oldest->first;
            series_.erase(oldest);
            bool still = false;
            for (const auto& [k, s] : series_) still = still || (k.worker_id == gone.worker_id && k.name == gone.name);
            if (!still) names_[gone.worker_id].erase(gone.name);
          }
          it = series_.emplace(key, Series{}).first;
          it->second.cluster_id = cluster_id.value_or("");
          if (w) {
            auto id = w->create_series(worker_id, it->second.cluster_id, key.rank, name);
            if (!id) return id.status();
            it->second.id = id.value();
          }
        }
        Series& s = it->second;
        touched.push_back(key);
        if (p.total_steps && s.total_steps != p.total_steps) {
          s.total_steps = p.total_steps;
          if (w && s.id != 0) {
            if (auto st = w->set_total_steps(s.id, *p.total_steps); !st) return st;
          }
        }
        StoredPoint sp{0, p.step, p.time, value};
        if (w && s.id != 0) {
          auto row = w->append(s.id, p.step, p.time, value);
          if (!row) return row.status();
          sp.row = row.value();
        }
        s.points.push_back(sp);
        s.touched = ++clock_;
        std::vector<int64_t> removed;
        thin(s, removed);
        for (int64_t r : removed) {
          if (w) {
            if (auto st = w->remove_point(r); !st) return st;
          }
        }
      }
    }
    return api::Status::ok();
  };
  if (!store_) return apply(nullptr);
  api::Status s = store_->write([&](SeriesStore::Writer& w) { return apply(&w); });
  if (s) {
    for (const auto& key : touched) {
      auto it = series_.find(key);
      if (it == series_.end()) continue;
      committed_series_ = std::max(committed_series_, it->second.id);
      for (const auto& p : it->second.points) committed_row_ = std::max(committed_row_, p.row);
    }
    return s;
  }
  // (c): forget ids the rolled-back transaction handed out.
  for (const auto& key : touched) {
    auto it = series_.find(key);
    if (it == series_.end()) continue;
    if (it->second.id > committed_series_) it->second.id = 0;
    for (auto& p : it->second.points) {
      if (p.row > committed_row_) p.row = 0;
    }
  }
  return s;
}

api::Status TrainingSeries::restore() {
  if (!store_) return api::Status::ok();
  auto loaded = store_->load();
  if (!loaded) return loaded.status();
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<int64_t> removed_rows, removed_series;
  for (auto& stored : loaded.value()) {
    Series s;
    s.id = stored.id;
    s.cluster_id = stored.cluster_id;
    s.total_steps = stored.total_steps;
    s.points = std::move(stored.points);
    for (const auto& p : s.points) s.touched = std::max<uint64_t>(s.touched, static_cast<uint64_t>(p.row));
    while (s.points.size() >= options_.max_points && s.points.size() >= 3) thin(s, removed_rows);
    committed_series_ = std::max(committed_series_, s.id);
    if (!s.points.empty()) committed_row_ = std::max(committed_row_, s.points.back().row);
    names_[stored.worker_id].insert(stored.name);
    series_[Key{stored.worker_id, stored.rank, stored.name}] = std::move(s);
  }
  while (series_.size() > options_.max_series) {
    auto oldest = std::min_element(series_.begin(), series_.end(),
                                   [](const auto& a, const auto& b) { return a.second.touched < b.second.touched; });
    removed_series.push_back(oldest->second.id);
    series_.erase(oldest);
  }
  for (const auto& [key, s] : series_) {
    for (const auto& p : s.points) committed_row_ = std::max(committed_row_, p.row);
  }
  clock_ = static_cast<uint64_t>(committed_row_);
  if (removed_rows.empty() && removed_series.empty()) return api::Status::ok();
  return store_->write([&](SeriesStore::Writer& w) -> api::Status {
    for (int64_t r : removed_rows) {
      if (auto s = w.remove_point(r); !s) return s;
    }
    for (int64_t id : removed_series) {
      if (auto s = w.remove_series(id); !s) return s;
    }
    return api::Status::ok();
  });
}

std::vector<ScalarSeries> TrainingSeries::select(const std::function<bool(const Key&, const Series&)>& which) const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<ScalarSeries> out;
  for (const auto& [key, s] : series_) {
    if (!which(key, s)) continue;
    ScalarSeries v;
    v.worker_id = key.worker_id;
    v.cluster_id = s.cluster_id;
    if (key.rank >= 0) v.rank = key.rank;
    v.name = key.name;
    v.total_steps = s.total_steps;
    v.points.reserve(s.points.size());
    for (const auto& p : s.points) v.points.push_back({p.step, p.time, p.value});
    out.push_back(std::move(v));
  }
  return out;
}

std::vector<ScalarSeries> TrainingSeries::worker_series(const std::string& id) const {
  return select([&id](const Key& k, const Series&) { return k.worker_id == id; });
}

std::vector<ScalarSeries> TrainingSeries::cluster_series(const std::string& id) const {
  return select([&id](const Key&, const Series& s) { return s.cluster_id == id; });
}

size_t TrainingSeries::series_count() const {
  std::lock_guard<std::mutex> lock(mu_);
  return series_.size();
}

std::map<std::string, TrainingPoint> TrainingSeries::latest_by_cluster() const {
  std::lock_guard<std::mutex> lock(mu_);
  // Per cluster and classic name: the newest point, from rank 0 (or a
  // series without rank) when there is one, else from any rank.
  struct Best {
    bool preferred = false;
    double time = -1;
    double value = 0;
  };
  std::map<std::string, TrainingPoint> out;
  std::map<std::pair<std::string, int>, Best> best;
  for (const auto& [key, s] : series_) {
    if (s.cluster_id.empty() || s.points.empty()) continue;
    TrainingPoint& p = out[s.cluster_id];
    p.step = std::max(p.step, s.points.back().step);
    const int c = classic_index(key.name);
    if (c < 0) continue;
    Best& b = best[{s.cluster_id, c}];
    const bool preferred = key.rank <= 0;
    const StoredPoint& last = s.points.back();
    if ((preferred && !b.preferred) || (preferred == b.preferred && last.time > b.time)) {
      b = {preferred, last.time, last.value};
    }
  }
  for (const auto& [k, b] : best) classic(out[k.first], k.second) = b.value;
  return out;
}

}  // namespace muster::service
