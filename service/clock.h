// Clock: the registry's only source of time, so that unit tests drive
// timeouts with a FakeClock instead of sleeping.
#pragma once

#include <chrono>
#include <mutex>
#include <string>

namespace muster::service {

using TimePoint = std::chrono::system_clock::time_point;

class Clock {
 public:
  virtual ~Clock() = default;
  virtual TimePoint now() const = 0;
};

class SystemClock final : public Clock {
 public:
  TimePoint now() const override { return std::chrono::system_clock::now(); }
};

// For tests: time moves only when advance() is called.
class FakeClock final : public Clock {
 public:
  explicit FakeClock(TimePoint start = TimePoint(std::chrono::seconds(1'800'000'000))) : now_(start) {}
  TimePoint now() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return now_;
  }
  void advance(std::chrono::milliseconds d) {
    std::lock_guard<std::mutex> lock(mu_);
    now_ += d;
  }

 private:
  mutable std::mutex mu_;
  TimePoint now_;
};

// RFC 3339 UTC with milliseconds: "2026-11-22T02:03:04.123Z".
std::string format_time(TimePoint t);

}  // namespace muster::service
