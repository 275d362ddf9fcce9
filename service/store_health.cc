#include "service/store_health.h"

#include <spdlog/spdlog.h>

namespace muster::service {

void StoreHealth::failed(const std::string& message) {
  std::lock_guard<std::mutex> lock(mu_);
  ++failures_;
  if (problem_) return;
  problem_ = message;
  since_ = std::chrono::steady_clock::now();
  ++episodes_;
  spdlog::error("{} (the state database refuses writes; changes are kept in memory and written again "
                "once it takes them; /healthz says degraded)",
                message);
}

void StoreHealth::succeeded() {
  std::lock_guard<std::mutex> lock(mu_);
  if (!problem_) return;
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - since_).count();
  spdlog::warn("the state database takes writes again: {} write(s) failed over {:.1f} s", failures_, seconds);
  problem_.reset();
  failures_ = 0;
}

std::optional<std::string> StoreHealth::problem() const {
  std::lock_guard<std::mutex> lock(mu_);
  return problem_;
}

size_t StoreHealth::episodes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return episodes_;
}

}  // namespace muster::service
