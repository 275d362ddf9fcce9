// Clock: the daemon's only source of time, so that unit tests drive
// timeouts with a FakeClock instead of sleeping.
//
// Two kinds of time, never mixed:
// - now(): monotonic (steady_clock). Every deadline and age is measured on
//   it: startup, heartbeat, await, wait-release and cluster timeouts, and
//   the retention of finished records. A step of the wall clock (NTP, a
//   suspended VM resuming, an operator's `date -s`) moves none of them.
// - wall(): the calendar (system_clock), for display only: created_at,
//   finished_at and the other RFC 3339 times of the API.
#pragma once

#include <chrono>
#include <mutex>
#include <string>

namespace muster::service {

using TimePoint = std::chrono::steady_clock::time_point;
using WallTime = std::chrono::system_clock::time_point;

class Clock {
 public:
  virtual ~Clock() = default;
  virtual TimePoint now() const = 0;
  virtual WallTime wall() const = 0;
};

class SystemClock final : public Clock {
 public:
  TimePoint now() const override { return std::chrono::steady_clock::now(); }
  WallTime wall() const override { return std::chrono::system_clock::now(); }
};

// For tests: time moves only when advance() (both clocks) or step_wall()
// (the calendar alone, as NTP would) is called.
class FakeClock final : public Clock {
 public:
  explicit FakeClock(WallTime wall_start = WallTime(std::chrono::seconds(1'800'000'000)))
      : now_(std::chrono::hours(1)), wall_(wall_start) {}
  TimePoint now() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return now_;
  }
  WallTime wall() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return wall_;
  }
  void advance(std::chrono::milliseconds d) {
    std::lock_guard<std::mutex> lock(mu_);
    now_ += d;
    wall_ += d;
  }
  void step_wall(std::chrono::milliseconds d) {
    std::lock_guard<std::mutex> lock(mu_);
    wall_ += d;
  }

 private:
  mutable std::mutex mu_;
  TimePoint now_;
  WallTime wall_;
};

// RFC 3339 UTC with milliseconds: "2026-11-22T02:03:04.123Z".
std::string format_time(WallTime t);

// A monotonic instant as the calendar shows it (for records and display),
// and a recorded calendar time back on the monotonic clock (restored records).
inline WallTime to_wall(const Clock& clock, TimePoint t) {
  return clock.wall() + std::chrono::duration_cast<WallTime::duration>(t - clock.now());
}
inline TimePoint from_wall(const Clock& clock, WallTime w) {
  return clock.now() - std::chrono::duration_cast<TimePoint::duration>(clock.wall() - w);
}

// A duration in seconds as messages show it: 2.5 -> "2.5", 30 -> "30".
std::string seconds_text(double seconds);

// A duration in seconds (a request's timeout_seconds) on the monotonic clock.
inline TimePoint::duration seconds_duration(double seconds) {
  return std::chrono::duration_cast<TimePoint::duration>(std::chrono::duration<double>(seconds));
}

}  // namespace muster::service
