// TokenIndex: agent token -> worker id, for WorkerRegistry (registry.h).
//
// Contract: a map under a mutex of its own, so that the authentication of
// every agent request (service/auth.h, on an HTTP I/O thread; heartbeats:
// every live worker every 2 s) never waits behind the registry's mutex. The
// registry keeps it in step with its records (set at launch and restore,
// erased with the record); a token briefly known for a record not there
// (or gone) only makes that one request answer 404.
#pragma once

#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>

namespace muster::service {

class TokenIndex {
 public:
  void set(const std::string& token, const std::string& id) {
    std::lock_guard<std::mutex> lock(mu_);
    ids_[token] = id;
  }
  void erase(const std::string& token) {
    std::lock_guard<std::mutex> lock(mu_);
    ids_.erase(token);
  }
  void clear() {
    std::lock_guard<std::mutex> lock(mu_);
    ids_.clear();
  }
  std::optional<std::string> find(const std::string& token) const {
    std::lock_guard<std::mutex> lock(mu_);
    const auto it = ids_.find(token);
    if (it == ids_.end()) return std::nullopt;
    return it->second;
  }

 private:
  mutable std::mutex mu_;
  std::unordered_map<std::string, std::string> ids_;
};

}  // namespace muster::service
