// Prometheus text exposition format 0.0.4: a writer and a histogram.
//
// Debian packages no maintained C++ Prometheus client (apt-cache search
// prometheus finds only Go/Python/other exporters), so /metrics is written
// here. The format: every family is "# HELP name text" and "# TYPE name
// counter|gauge|histogram" followed by its samples "name{l="v",...} value";
// label values escape backslash, double quote and newline; HELP text
// escapes backslash and newline; a histogram has cumulative
// name_bucket{le="..."} samples ending with le="+Inf", then name_sum and
// name_count. Values print as Go's strconv would read them (NaN, +Inf).
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace muster::service::metrics {

using Labels = std::vector<std::pair<std::string, std::string>>;

std::string escape_label_value(std::string_view value);
std::string escape_help(std::string_view text);
std::string format_value(double value);

// A fixed-bucket histogram; thread-safe.
class Histogram {
 public:
  explicit Histogram(std::vector<double> upper_bounds);
  void observe(double value);
  struct Snapshot {
    std::vector<double> bounds;
    std::vector<uint64_t> cumulative;  // one per bound (le), not counting +Inf
    uint64_t count = 0;
    double sum = 0;
  };
  Snapshot snapshot() const;

 private:
  mutable std::mutex mu_;
  std::vector<double> bounds_;
  std::vector<uint64_t> counts_;  // per bucket, not cumulative; last = above every bound
  double sum_ = 0;
};

// Latency buckets in seconds (1 ms .. 10 s).
std::vector<double> latency_buckets();

class TextWriter {
 public:
  // Starts a family; every sample written until the next family() must
  // belong to it. `type`: "counter", "gauge" or "histogram".
  void family(const std::string& name, const std::string& type, const std::string& help);
  void sample(const std::string& name, const Labels& labels, double value);
  // name_bucket/_sum/_count of the current (histogram) family.
  void histogram(const std::string& name, const Labels& labels, const Histogram::Snapshot& h);
  const std::string& text() const { return out_; }

 private:
  std::string out_;
};

}  // namespace muster::service::metrics
