// StoreHealth: whether the state database takes writes right now.
//
// Every Store write reports here. The first failure of an episode is logged
// (error, with the store's message); later failures are only counted; the
// first success after failures ends the episode with one line saying how
// many writes failed and for how long. problem() is what /healthz reports
// while an episode lasts ("degraded"). A full disk therefore shows up once
// in the log and at /healthz, never as a flood, and never silently.
// Thread-safe.
#pragma once

#include <chrono>
#include <cstddef>
#include <mutex>
#include <optional>
#include <string>

namespace muster::service {

class StoreHealth {
 public:
  void failed(const std::string& message);
  void succeeded();
  // The failure that opened the current episode (nullopt: writes succeed).
  std::optional<std::string> problem() const;
  // Episodes so far (tests).
  size_t episodes() const;

 private:
  mutable std::mutex mu_;
  std::optional<std::string> problem_;
  size_t failures_ = 0;
  size_t episodes_ = 0;
  std::chrono::steady_clock::time_point since_;
};

}  // namespace muster::service
