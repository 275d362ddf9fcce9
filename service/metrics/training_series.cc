#include "service/metrics/training_series.h"

#include <algorithm>

namespace muster::service {

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
    for (const auto& [name, v] : scalar_values(points[i])) {
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
      for (const auto& [name, value] : scalar_values(p)) {
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
  for (const auto& [k, b] : best) classic_scalar(out[k.first], k.second) = b.value;
  return out;
}

}  // namespace muster::service
