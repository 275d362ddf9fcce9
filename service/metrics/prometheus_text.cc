#include "service/metrics/prometheus_text.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace muster::service::metrics {

std::string escape_label_value(std::string_view value) {
  std::string out;
  out.reserve(value.size());
  for (char c : value) {
    if (c == '\\') out += "\\\\";
    else if (c == '"') out += "\\\"";
    else if (c == '\n') out += "\\n";
    else out += c;
  }
  return out;
}

std::string escape_help(std::string_view text) {
  std::string out;
  for (char c : text) {
    if (c == '\\') out += "\\\\";
    else if (c == '\n') out += "\\n";
    else out += c;
  }
  return out;
}

std::string format_value(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "+Inf" : "-Inf";
  if (value == std::floor(value) && std::fabs(value) < 1e15) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.0f", value);
    return buf;
  }
  // The shortest form that reads back as the same double.
  char buf[32];
  for (int precision = 6; precision <= 17; ++precision) {
    std::snprintf(buf, sizeof buf, "%.*g", precision, value);
    if (std::strtod(buf, nullptr) == value) break;
  }
  return buf;
}

Histogram::Histogram(std::vector<double> upper_bounds) : bounds_(std::move(upper_bounds)) {
  std::sort(bounds_.begin(), bounds_.end());
  counts_.assign(bounds_.size() + 1, 0);
}

void Histogram::observe(double value) {
  const size_t i = std::lower_bound(bounds_.begin(), bounds_.end(), value) - bounds_.begin();
  std::lock_guard<std::mutex> lock(mu_);
  ++counts_[i];
  sum_ += value;
}

Histogram::Snapshot Histogram::snapshot() const {
  std::lock_guard<std::mutex> lock(mu_);
  Snapshot s;
  s.bounds = bounds_;
  uint64_t running = 0;
  for (size_t i = 0; i < bounds_.size(); ++i) {
    running += counts_[i];
    s.cumulative.push_back(running);
  }
  s.count = running + counts_.back();
  s.sum = sum_;
  return s;
}

std::vector<double> latency_buckets() {
  return {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10};
}

namespace {
std::string label_text(const Labels& labels, const std::pair<std::string, std::string>* extra = nullptr) {
  if (labels.empty() && !extra) return "";
  std::string out = "{";
  bool first = true;
  auto add = [&](const std::string& k, const std::string& v) {
    if (!first) out += ",";
    first = false;
    out += k + "=\"" + escape_label_value(v) + "\"";
  };
  for (const auto& [k, v] : labels) add(k, v);
  if (extra) add(extra->first, extra->second);
  return out + "}";
}
}  // namespace

void TextWriter::family(const std::string& name, const std::string& type, const std::string& help) {
  out_ += "# HELP " + name + " " + escape_help(help) + "\n";
  out_ += "# TYPE " + name + " " + type + "\n";
}

void TextWriter::sample(const std::string& name, const Labels& labels, double value) {
  out_ += name + label_text(labels) + " " + format_value(value) + "\n";
}

void TextWriter::histogram(const std::string& name, const Labels& labels, const Histogram::Snapshot& h) {
  for (size_t i = 0; i < h.bounds.size(); ++i) {
    const std::pair<std::string, std::string> le{"le", format_value(h.bounds[i])};
    out_ += name + "_bucket" + label_text(labels, &le) + " " + format_value(static_cast<double>(h.cumulative[i])) + "\n";
  }
  const std::pair<std::string, std::string> inf{"le", "+Inf"};
  out_ += name + "_bucket" + label_text(labels, &inf) + " " + format_value(static_cast<double>(h.count)) + "\n";
  out_ += name + "_sum" + label_text(labels) + " " + format_value(h.sum) + "\n";
  out_ += name + "_count" + label_text(labels) + " " + format_value(static_cast<double>(h.count)) + "\n";
}

}  // namespace muster::service::metrics
