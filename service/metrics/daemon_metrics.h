// DaemonMetrics: what GET /metrics reports (Prometheus text format 0.0.4).
//
// Counted here as they happen: API requests by method, route pattern (not
// the raw path, so ids do not explode the series) and status code, with a
// latency histogram; state-store write latency; the gaps between a worker's
// heartbeats; worker launches, stops and failures (from the registry's
// change events). Read at scrape time from `Sources`: workers by status and
// backend, clusters by mode and status, the oldest running worker's
// heartbeat age, the newest training scalars of every running cluster, and
// the clusters' recoveries (resets, restarts, deaths, replacements, recovery
// seconds), counted from their generations.
// Thread-safe; the observe_* calls take one short mutex.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "api/worker.h"
#include "api/cluster.h"
#include "service/metrics/prometheus_text.h"
#include "service/metrics/training_series.h"

namespace muster::service {

class DaemonMetrics {
 public:
  DaemonMetrics();

  void observe_request(const std::string& method, const std::string& route, int code, double seconds);
  void observe_store_write(double seconds);
  // `told`: the interval the worker was told at its previous beat; a gap
  // over 1.5 x told counts as late.
  void observe_heartbeat_gap(double seconds, double told);
  // Every worker change the registry reports.
  void on_worker_change(const api::Worker& worker);

  struct Sources {
    std::string backend;
    std::function<std::map<api::WorkerStatus, size_t>()> worker_counts;  // workers by status
    std::function<std::vector<api::Cluster>()> clusters;
    std::function<double()> max_heartbeat_age;  // seconds, 0 when nothing runs
    std::function<double()> heartbeat_interval;  // seconds, what a reply tells agents now
    const TrainingSeries* training = nullptr;
  };
  std::string render(const Sources& sources) const;

 private:
  static std::string utf8_prefix(const std::string& text, size_t n);
  void render_recoveries(metrics::TextWriter& out, const std::vector<api::Cluster>& clusters) const;
  using RequestKey = std::tuple<std::string, std::string, int>;  // method, route, code
  mutable std::mutex mu_;
  std::map<RequestKey, std::unique_ptr<metrics::Histogram>> requests_;
  metrics::Histogram store_writes_;
  metrics::Histogram heartbeat_gaps_;
  std::atomic<uint64_t> heartbeats_late_{0};
  std::set<std::string> live_;   // workers counted as launched that have not ended
  std::set<std::string> ended_;  // the most recently ended, oldest first in ended_order_
  std::deque<std::string> ended_order_;
  double launches_ = 0, stops_ = 0, failures_ = 0;
};

}  // namespace muster::service
