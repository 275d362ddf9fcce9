#include "service/metrics/daemon_metrics.h"

namespace muster::service {

using metrics::Labels;
using metrics::TextWriter;

DaemonMetrics::DaemonMetrics()
    : store_writes_(metrics::latency_buckets()), heartbeat_gaps_({0.5, 1, 2, 3, 5, 8, 13, 21, 34, 60}) {}

void DaemonMetrics::observe_request(const std::string& method, const std::string& route, int code, double seconds) {
  metrics::Histogram* h;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto& slot = requests_[{method, route, code}];
    if (!slot) slot = std::make_unique<metrics::Histogram>(metrics::latency_buckets());
    h = slot.get();
  }
  h->observe(seconds);
}

void DaemonMetrics::observe_store_write(double seconds) { store_writes_.observe(seconds); }
void DaemonMetrics::observe_heartbeat_gap(double seconds, double told) {
  heartbeat_gaps_.observe(seconds);
  if (told > 0 && seconds > 1.5 * told) heartbeats_late_.fetch_add(1, std::memory_order_relaxed);
}

void DaemonMetrics::on_worker_change(const api::Worker& w) {
  std::lock_guard<std::mutex> lock(mu_);
  // A worker is counted once when first seen, once when it ends. Unfinished
  // workers are remembered, and the last kRecentlyEnded that ended (a
  // repeated report of an end is not a second end): bounded however long
  // the daemon runs.
  constexpr size_t kRecentlyEnded = 65536;
  if (ended_.count(w.id)) return;
  if (live_.insert(w.id).second) launches_ += 1;
  if (!api::is_terminal(w.status)) return;
  live_.erase(w.id);
  ended_.insert(w.id);
  ended_order_.push_back(w.id);
  if (ended_order_.size() > kRecentlyEnded) {
    ended_.erase(ended_order_.front());
    ended_order_.pop_front();
  }
  if (w.status == api::WorkerStatus::kStopped) stops_ += 1;
  if (w.status == api::WorkerStatus::kFailed || w.status == api::WorkerStatus::kTimedOut ||
      w.status == api::WorkerStatus::kLost) {
    failures_ += 1;
  }
}

std::string DaemonMetrics::render(const Sources& src) const {
  TextWriter out;
  static const api::WorkerStatus kStatuses[] = {
      api::WorkerStatus::kScheduling, api::WorkerStatus::kStarting, api::WorkerStatus::kRunning,
      api::WorkerStatus::kSucceeded,  api::WorkerStatus::kFailed,   api::WorkerStatus::kTimedOut,
      api::WorkerStatus::kStopped,    api::WorkerStatus::kLost};
  std::map<std::string, double> by_status;
  for (auto s : kStatuses) by_status[api::worker_status_name(s)] = 0;
  if (src.worker_counts) {
    for (const auto& [status, n] : src.worker_counts()) by_status[api::worker_status_name(status)] += static_cast<double>(n);
  }
  out.family("muster_workers", "gauge", "Workers this daemon knows, by status and backend.");
  for (const auto& [status, n] : by_status) out.sample("muster_workers", {{"status", status}, {"backend", src.backend}}, n);

  {
    std::lock_guard<std::mutex> lock(mu_);
    out.family("muster_worker_launches_total", "counter", "Workers launched since the daemon started.");
    out.sample("muster_worker_launches_total", {}, launches_);
    out.family("muster_worker_stops_total", "counter", "Workers that ended stopped through the API.");
    out.sample("muster_worker_stops_total", {}, stops_);
    out.family("muster_worker_failures_total", "counter", "Workers that ended failed, timedout or lost.");
    out.sample("muster_worker_failures_total", {}, failures_);
  }

  std::vector<api::Cluster> clusters = src.clusters ? src.clusters() : std::vector<api::Cluster>{};
  std::map<std::pair<std::string, std::string>, double> by_mode;
  for (auto mode : {api::ClusterKind::kPs, api::ClusterKind::kMpi, api::ClusterKind::kElastic}) {
    for (auto st : {api::ClusterStatus::kStarting, api::ClusterStatus::kRunning, api::ClusterStatus::kSucceeded,
                    api::ClusterStatus::kFailed, api::ClusterStatus::kStopped}) {
      by_mode[{api::cluster_kind_name(mode), api::cluster_status_name(st)}] = 0;
    }
  }
  for (const auto& c : clusters) by_mode[{api::cluster_kind_name(c.request.mode), api::cluster_status_name(c.status)}] += 1;
  out.family("muster_clusters", "gauge", "Clusters this daemon knows, by mode and status.");
  for (const auto& [key, n] : by_mode) out.sample("muster_clusters", {{"mode", key.first}, {"status", key.second}}, n);
  render_recoveries(out, clusters);
  // The root cause of each failed cluster the daemon still keeps (retention
  // bounds them): the rank whose failure came first, its host, how it ended
  // and its exception line (cut at 200 bytes), for alerts that say why.
  out.family("muster_cluster_failed_rank", "gauge",
             "1 for each failed cluster: the rank whose failure came first, its host, exit and exception.");
  for (const auto& c : clusters) {
    if (c.status != api::ClusterStatus::kFailed || !c.failed_rank) continue;
    const api::RankFailure& f = *c.failed_rank;
    const std::string exit = f.signal ? "signal " + std::to_string(*f.signal)
                                      : (f.exit_code ? std::to_string(*f.exit_code) : std::string());
    out.sample("muster_cluster_failed_rank",
               {{"cluster", c.id}, {"mode", api::cluster_kind_name(c.request.mode)}, {"rank", std::to_string(f.rank)},
                {"host", f.host}, {"worker", f.worker_id}, {"exit", exit}, {"exception", utf8_prefix(f.exception, 200)}},
               1);
  }

  out.family("muster_http_requests_total", "counter", "API requests answered, by method, route pattern and status code.");
  std::vector<std::pair<Labels, metrics::Histogram::Snapshot>> snaps;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [key, h] : requests_) {
      const auto& [method, route, code] = key;
      snaps.push_back({{{"method", method}, {"route", route}, {"code", std::to_string(code)}}, h->snapshot()});
    }
  }
  for (const auto& [labels, s] : snaps) out.sample("muster_http_requests_total", labels, static_cast<double>(s.count));
  out.family("muster_http_request_duration_seconds", "histogram",
             "Time from a request's headers to its response, by method, route pattern and status code.");
  for (const auto& [labels, s] : snaps) out.histogram("muster_http_request_duration_seconds", labels, s);

  out.family("muster_store_write_duration_seconds", "histogram", "State database write transactions.");
  out.histogram("muster_store_write_duration_seconds", {}, store_writes_.snapshot());
  out.family("muster_heartbeat_interval_seconds", "histogram", "Time between two heartbeats of one worker.");
  out.histogram("muster_heartbeat_interval_seconds", {}, heartbeat_gaps_.snapshot());
  out.family("muster_heartbeats_late_total", "counter",
             "Heartbeats that came more than 1.5 intervals (the interval told to that worker) after its last.");
  out.sample("muster_heartbeats_late_total", {}, static_cast<double>(heartbeats_late_.load()));
  out.family("muster_heartbeat_assigned_interval_seconds", "gauge",
             "The heartbeat interval agents are told now (stretched past --heartbeat-rate heartbeats a second).");
  out.sample("muster_heartbeat_assigned_interval_seconds", {}, src.heartbeat_interval ? src.heartbeat_interval() : 0);
  out.family("muster_heartbeat_lag_seconds", "gauge", "Seconds since the least recent heartbeat of a running worker.");
  out.sample("muster_heartbeat_lag_seconds", {}, src.max_heartbeat_age ? src.max_heartbeat_age() : 0);

  if (src.training) {
    std::set<std::string> running;
    for (const auto& c : clusters) {
      if (c.status == api::ClusterStatus::kRunning) running.insert(c.id);
    }
    const auto latest = src.training->latest_by_cluster();
    struct Scalar {
      const char* name;
      const char* help;
      std::optional<double> TrainingPoint::*field;
    };
    const Scalar scalars[] = {
        {"muster_training_loss", "The newest loss rank 0 / the chief reported.", &TrainingPoint::loss},
        {"muster_training_images_per_second", "The newest training throughput reported.", &TrainingPoint::images_per_sec},
        {"muster_training_learning_rate", "The newest learning rate reported.", &TrainingPoint::lr},
        {"muster_training_accuracy", "The newest accuracy reported.", &TrainingPoint::accuracy}};
    out.family("muster_training_step", "gauge", "The newest step a running cluster reported.");
    for (const auto& [id, p] : latest) {
      if (running.count(id)) out.sample("muster_training_step", {{"cluster", id}}, static_cast<double>(p.step));
    }
    for (const auto& s : scalars) {
      out.family(s.name, "gauge", s.help);
      for (const auto& [id, p] : latest) {
        if (running.count(id) && p.*(s.field)) out.sample(s.name, {{"cluster", id}}, *(p.*(s.field)));
      }
    }
  }
  return out.text();
}

// Resets (an elastic world re-formed), restarts (max_restarts), recoveries
// (a generation that formed after a failure) and deaths, by mode, counted
// from the clusters' generations (they persist, so the counters never go
// back), and the recovery times as a histogram.
// At most `n` bytes of `text`, never cutting a UTF-8 character in two.
std::string DaemonMetrics::utf8_prefix(const std::string& text, size_t n) {
  if (text.size() <= n) return text;
  while (n > 0 && (static_cast<unsigned char>(text[n]) & 0xC0) == 0x80) --n;
  return text.substr(0, n);
}

void DaemonMetrics::render_recoveries(metrics::TextWriter& out, const std::vector<api::Cluster>& clusters) const {
  struct Counts {
    double resets = 0, restarts = 0, recoveries = 0, deaths = 0, replacements = 0;
  };
  std::map<std::string, Counts> by_mode;
  metrics::Histogram recovery(std::vector<double>{0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300});
  for (auto mode : {api::ClusterKind::kPs, api::ClusterKind::kMpi, api::ClusterKind::kElastic}) {
    by_mode[api::cluster_kind_name(mode)] = Counts{};
  }
  for (const auto& c : clusters) {
    Counts& n = by_mode[api::cluster_kind_name(c.request.mode)];
    n.resets += c.resets;
    n.restarts += c.restarts;
    for (const auto& g : c.generations) {
      n.deaths += static_cast<double>(g.deaths.size());
      n.replacements += static_cast<double>(g.replacements.size());
      if (g.recovery_seconds) {
        n.recoveries += 1;
        recovery.observe(*g.recovery_seconds);
      }
    }
  }
  const std::pair<const char*, double Counts::*> families[] = {
      {"muster_cluster_resets_total", &Counts::resets},
      {"muster_cluster_restarts_total", &Counts::restarts},
      {"muster_cluster_recoveries_total", &Counts::recoveries},
      {"muster_cluster_deaths_total", &Counts::deaths},
      {"muster_cluster_replacements_total", &Counts::replacements}};
  const char* help[] = {"Times an elastic cluster's world re-formed after a rank was lost or joined.",
                        "Restarts (every task, or one replaced ps worker) under max_restarts.",
                        "Generations that formed after a failure (a reset or a restart).",
                        "Workers of a cluster that died (failed, lost, stopped, timed out) while it ran.",
                        "Workers launched to replace a dead one."};
  for (size_t i = 0; i < std::size(families); ++i) {
    out.family(families[i].first, "counter", help[i]);
    for (const auto& [mode, n] : by_mode) out.sample(families[i].first, {{"mode", mode}}, n.*(families[i].second));
  }
  out.family("muster_cluster_recovery_seconds", "histogram",
             "From a generation's end to the next one formed (elastic) or every task running again (restart).");
  out.histogram("muster_cluster_recovery_seconds", {}, recovery.snapshot());
}

}  // namespace muster::service
