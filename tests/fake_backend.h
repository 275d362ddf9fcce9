// FakeBackend: a workers::Backend that only records calls, for unit tests
// of the registry and the HTTP layer (no process is ever started).
#pragma once

#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "workers/backend.h"

namespace muster::testing {

class FakeBackend final : public workers::Backend {
 public:
  std::string name() const override { return "fake"; }
  std::string master_address() const override { return "127.0.0.1"; }
  api::Status launch(const std::vector<workers::LaunchSpec>& specs) override {
    std::lock_guard<std::mutex> lock(mu);
    if (!fail_launch.is_ok()) return fail_launch;
    for (const auto& s : specs) {
      launched.push_back(s);
      states[s.worker_id] = {workers::ProcessState::kRunning, std::nullopt};
    }
    return api::Status::ok();
  }
  api::Status stop(const std::string& id, std::chrono::milliseconds) override {
    std::lock_guard<std::mutex> lock(mu);
    stopped.push_back(id);
    if (states.count(id)) states[id] = {workers::ProcessState::kExited, 143};
    return api::Status::ok();
  }
  workers::ProcessStatus poll(const std::string& id) override {
    std::lock_guard<std::mutex> lock(mu);
    auto it = states.find(id);
    return it == states.end() ? workers::ProcessStatus{} : it->second;
  }
  void shutdown() override {}

  void set_exited(const std::string& id, int code) {
    std::lock_guard<std::mutex> lock(mu);
    states[id] = {workers::ProcessState::kExited, code};
  }

  std::mutex mu;
  api::Status fail_launch;
  std::vector<workers::LaunchSpec> launched;
  std::vector<std::string> stopped;
  std::map<std::string, workers::ProcessStatus> states;
};

}  // namespace muster::testing
