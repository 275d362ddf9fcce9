// HostBlacklist: the hosts an elastic cluster's ranks failed on, after
// Horovod's HostManager (horovod/runner/elastic/discovery.py): a failure
// count per host, hosts blacklisted once they reach failures_to_blacklist,
// each for a cooldown (or for the cluster's life) before it may host a
// rank again.
//
// Contract
// - record_failure(host, now): one more failure of a rank on `host`. When
//   the count reaches failures_to_blacklist and the host is not blacklisted
//   already, it is blacklisted, its count starts again from 0 and the call
//   returns true (the caller logs it).
// - The cooldown is Horovod's: with blacklist_cooldown_range [lo, hi]
//   (seconds), the n-th blacklisting of a host lasts
//   lo * 2^n + U(0, lo), clamped to [lo, hi]; without a range, for good.
//   The random draw is the caller's (`jitter`, a value in [0, 1)), so tests
//   choose it.
// - blacklisted(host, now), until(host): whether the host is out now, and
//   when it comes back (TimePoint::max(): never).
// - entries(now): the hosts blacklisted at `now`, for the cluster's record.
// Threads: none of its own; the elastic mode calls it from the manager's
// thread only. Pure state: no clock, no I/O.
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "service/clock.h"

namespace muster::service::elastic {

struct HostBlacklistOptions {
  int failures_to_blacklist = 2;
  std::optional<std::pair<int, int>> cooldown_range{};  // seconds [lo, hi]; none: blacklisted for good
};

class HostBlacklist {
 public:
  struct Entry {
    std::string host;
    TimePoint until;  // TimePoint::max(): for the cluster's life
    int times = 0;    // how often this host was blacklisted
  };

  HostBlacklist(HostBlacklistOptions options, std::function<double()> jitter)
      : options_(std::move(options)), jitter_(std::move(jitter)) {}

  bool record_failure(const std::string& host, TimePoint now);
  bool blacklisted(const std::string& host, TimePoint now) const;
  TimePoint until(const std::string& host) const;
  std::vector<Entry> entries(TimePoint now) const;
  const HostBlacklistOptions& options() const { return options_; }

 private:
  HostBlacklistOptions options_;
  std::function<double()> jitter_;
  std::map<std::string, int> failures_;
  std::map<std::string, TimePoint> until_;
  std::map<std::string, int> times_;  // blacklistings per host: the cooldown's growth
};

}  // namespace muster::service::elastic
