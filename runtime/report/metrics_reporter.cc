#include "runtime/report/metrics_reporter.h"

#include "api/base/settings.h"
#include "api/base/worker_env.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <initializer_list>
#include <vector>

namespace muster::runtime::report {

namespace {
void add_scalar(std::string& out, const char* name, const std::optional<double>& v) {
  if (!v || !std::isfinite(*v)) return;  // the daemon rejects NaN and infinities
  char buf[64];
  std::snprintf(buf, sizeof buf, ",\"%s\":%.9g", name, *v);
  out += buf;
}

std::string env(const char* name) { return base::Settings::environment().text(name).value; }

bool valid_name(const std::string& name) {
  if (name.empty() || name.size() > 64 || name.front() == ' ' || name.back() == ' ') return false;
  for (char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == ' ' ||
                    c == '_' || c == '.' || c == '/' || c == ':' || c == '(' || c == ')' || c == '-';
    if (!ok) return false;
  }
  return true;
}

std::optional<int> env_rank() {
  for (const char* name : {"OMPI_COMM_WORLD_RANK", "HOROVOD_RANK", "PMI_RANK", "RANK"}) {
    const std::string v = env(name);
    if (!v.empty() && v.size() < 6 && v.find_first_not_of("0123456789") == std::string::npos) return std::stoi(v);
  }
  return std::nullopt;
}
}  // namespace

std::string points_json(const std::deque<std::pair<Point, double>>& points, size_t begin, size_t end) {
  std::string out = "{\"points\":[";
  for (size_t i = begin; i < end; ++i) {
    const auto& [p, time] = points[i];
    char buf[96];
    std::snprintf(buf, sizeof buf, "%s{\"step\":%lld,\"time\":%.3f", i == begin ? "" : ",",
                  static_cast<long long>(p.step), time);
    out += buf;
    add_scalar(out, "loss", p.loss);
    add_scalar(out, "images_per_sec", p.images_per_sec);
    add_scalar(out, "lr", p.lr);
    add_scalar(out, "accuracy", p.accuracy);
    if (p.rank) out += ",\"rank\":" + std::to_string(*p.rank);
    if (p.total_steps) out += ",\"total_steps\":" + std::to_string(*p.total_steps);
    std::string scalars;
    for (const auto& [name, v] : p.scalars) {
      if (!valid_name(name) || !std::isfinite(v)) continue;  // names need no JSON escaping
      char buf[64];
      std::snprintf(buf, sizeof buf, "%.9g", v);
      scalars += (scalars.empty() ? "\"" : ",\"") + name + "\":" + buf;
    }
    if (!scalars.empty()) out += ",\"scalars\":{" + scalars + "}";
    out += "}";
  }
  return out + "]}";
}

MetricsReporter::MetricsReporter(ReporterOptions options) : options_(std::move(options)) {
  auto target = parse_http_url(options_.url);
  enabled_ = target && !options_.worker_id.empty() && !options_.token.empty();
  if (!enabled_) return;
  target_ = *target;
  thread_ = std::thread([this] { loop(); });
}

std::unique_ptr<MetricsReporter> MetricsReporter::from_env() {
  ReporterOptions o;
  o.url = env(base::kEnvUrl);
  o.worker_id = env(base::kEnvWorkerId);
  o.token = env(base::kEnvMetricsToken);
  if (o.token.empty()) o.token = env(base::kEnvAgentToken);
  o.rank = env_rank();
  return std::make_unique<MetricsReporter>(std::move(o));
}

MetricsReporter::~MetricsReporter() {
  if (!enabled_) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    quit_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void MetricsReporter::report(const Point& point) {
  if (!enabled_) return;
  const double now = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  // A point without one finite scalar would make the daemon refuse its whole batch.
  bool any = false;
  for (const auto* v : {&point.loss, &point.images_per_sec, &point.lr, &point.accuracy}) {
    any = any || (*v && std::isfinite(**v));
  }
  for (const auto& [name, v] : point.scalars) any = any || (valid_name(name) && std::isfinite(v));
  if (!any) return;
  std::lock_guard<std::mutex> lock(mu_);
  if (queue_.size() >= options_.max_queued) {
    ++dropped_;
    return;
  }
  queue_.emplace_back(point, now);
  if (!queue_.back().first.rank) queue_.back().first.rank = options_.rank;
}

bool MetricsReporter::send_some(std::unique_lock<std::mutex>& lock) {
  const size_t n = std::min(queue_.size(), options_.max_batch);
  if (n == 0) return false;
  const std::string body = points_json(queue_, 0, n);
  lock.unlock();
  const auto result = http_post_json(target_, "/api/v1/agent/workers/" + options_.worker_id + "/metrics",
                                     options_.token, body, options_.timeout);
  lock.lock();
  // Sent or refused, the batch goes: a daemon that is down loses only it,
  // and one that refuses it (400) would refuse it again.
  queue_.erase(queue_.begin(), queue_.begin() + static_cast<std::ptrdiff_t>(n));
  if (result.status >= 200 && result.status < 300) {
    sent_ += n;
  } else {
    ++failed_;
    dropped_ += n;
  }
  return true;
}

void MetricsReporter::loop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!quit_) {
    cv_.wait_for(lock, options_.interval, [this] { return quit_; });
    send_some(lock);
  }
  send_some(lock);  // one last try for what is left
}

uint64_t MetricsReporter::sent() const {
  std::lock_guard<std::mutex> lock(mu_);
  return sent_;
}
uint64_t MetricsReporter::dropped() const {
  std::lock_guard<std::mutex> lock(mu_);
  return dropped_;
}
uint64_t MetricsReporter::failed_requests() const {
  std::lock_guard<std::mutex> lock(mu_);
  return failed_;
}

}  // namespace muster::runtime::report
