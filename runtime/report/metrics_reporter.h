// MetricsReporter: sends training scalars (step, loss, images/s, learning
// rate, accuracy, and any other by name) from any rank to musterd, for the
// dashboard's curves (one line per rank) and /metrics:
//   POST $MUSTER_URL/api/v1/agent/workers/$MUSTER_WORKER_ID/metrics
//   Authorization: Bearer $MUSTER_METRICS_TOKEN (else $MUSTER_AGENT_TOKEN)
//   {"points": [{"step": ..., "time": ..., "loss": ..., ...}, ...]}
// (musterd gives these variables to every worker's script and, for mpi
// clusters, to mpirun's ranks; the metrics token authorises only this route).
//
// Contract: report() never blocks training and never fails: it appends to a
// bounded queue (`max_queued` points; beyond it new points are dropped and
// counted) that a background thread sends every `interval` as one batch
// (at most `max_batch` points), with a timeout per request. A daemon that
// is down or answers an error only loses those points. Without the three
// variables (training outside musterd) the reporter is disabled: report()
// returns at once and no thread is started. The destructor sends what is
// queued (one last try, bounded by the timeout) and joins the thread.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "runtime/report/http_post.h"

namespace muster::runtime::report {

struct Point {
  int64_t step = 0;
  std::optional<double> loss, images_per_sec, lr, accuracy;
  // Any other scalar by name (1..64 of [A-Za-z0-9 _./:()-]; others are
  // left out of the point, as a daemon would refuse the whole batch).
  std::map<std::string, double> scalars;
  std::optional<int64_t> total_steps;  // the run's last step, when known (the dashboard's ETA)
  std::optional<int> rank;             // unset: ReporterOptions::rank
};

struct ReporterOptions {
  std::string url;          // http://host:port (musterd)
  std::string worker_id;
  std::string token;        // the worker's metrics (or agent) token
  std::chrono::milliseconds interval{1000};
  std::chrono::milliseconds timeout{2000};
  size_t max_queued = 10000;
  size_t max_batch = 1000;
  // The rank every point is reported for (one curve per rank); from_env()
  // takes OMPI_COMM_WORLD_RANK, HOROVOD_RANK, PMI_RANK or RANK.
  std::optional<int> rank;
};

class MetricsReporter {
 public:
  // Disabled when `options` lacks the url, worker id or token, or the url
  // is not http://host:port.
  explicit MetricsReporter(ReporterOptions options);
  // From MUSTER_URL, MUSTER_WORKER_ID, MUSTER_METRICS_TOKEN (or MUSTER_AGENT_TOKEN)
  // and the launcher's rank variable.
  static std::unique_ptr<MetricsReporter> from_env();
  ~MetricsReporter();
  MetricsReporter(const MetricsReporter&) = delete;
  MetricsReporter& operator=(const MetricsReporter&) = delete;

  bool enabled() const { return enabled_; }
  void report(const Point& point);

  // For tests and logs.
  uint64_t sent() const;
  uint64_t dropped() const;
  uint64_t failed_requests() const;

 private:
  void loop();
  bool send_some(std::unique_lock<std::mutex>& lock);

  ReporterOptions options_;
  HttpTarget target_;
  bool enabled_ = false;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::pair<Point, double>> queue_;  // with the wall time it was reported
  bool quit_ = false;
  uint64_t sent_ = 0, dropped_ = 0, failed_ = 0;
  std::thread thread_;
};

// The JSON body of one batch (exposed for tests).
std::string points_json(const std::deque<std::pair<Point, double>>& points, size_t begin, size_t end);

}  // namespace muster::runtime::report
