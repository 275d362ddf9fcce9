#include "service/elastic/host_blacklist.h"

#include <algorithm>
#include <cmath>

namespace muster::service::elastic {

bool HostBlacklist::record_failure(const std::string& host, TimePoint now) {
  if (++failures_[host] < options_.failures_to_blacklist) return false;
  if (blacklisted(host, now)) return false;
  const int n = ++times_[host];
  if (!options_.cooldown_range) {
    until_[host] = TimePoint::max();
  } else {
    const auto [lo, hi] = *options_.cooldown_range;
    const double delay = std::clamp(lo * std::pow(2.0, n) + jitter_() * lo, double(lo), double(hi));
    until_[host] = now + std::chrono::duration_cast<TimePoint::duration>(std::chrono::duration<double>(delay));
  }
  failures_[host] = 0;
  return true;
}

bool HostBlacklist::blacklisted(const std::string& host, TimePoint now) const {
  auto it = until_.find(host);
  return it != until_.end() && now < it->second;
}

TimePoint HostBlacklist::until(const std::string& host) const {
  auto it = until_.find(host);
  return it == until_.end() ? TimePoint{} : it->second;
}

std::vector<HostBlacklist::Entry> HostBlacklist::entries(TimePoint now) const {
  std::vector<Entry> out;
  for (const auto& [host, until] : until_) {
    if (now >= until) continue;
    auto t = times_.find(host);
    out.push_back({host, until, t == times_.end() ? 0 : t->second});
  }
  return out;
}

}  // namespace muster::service::elastic
