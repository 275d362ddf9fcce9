// FakeBackend: a workers::Backend that only records calls, for unit tests
// of the registry and the HTTP layer (no process is ever started).
//
// With no knob set it keeps the Backend contract (tests/
// backend_contract_test.cc holds it to it, beside the real backends): launch
// all or nothing, stop idempotent, poll of an unknown worker kUnknown, an
// identity ("fake:<id>") that a fresh FakeBackend adopts, forget dropping
// the worker.
//
// Knobs for launch(): `fail_launch` refuses the whole batch; the ids in
// `unstartable` cannot start (the workers of the batch started before one
// are stopped, and the error names it, as the contract says); `fail_at = k`
// starts workers 0..k-1 one by one and fails on worker k, naming it, and
// leaves the started ones running (worse than the Backend contract allows:
// the registry must clean up anyway); `gate` (when set) makes launch() wait
// until the test opens it, and `launching` tells the test it is waiting.
// `running` holds the workers started and not stopped since. stop() fails
// for the ids in `refuse_stop` (naming them), and calls `on_stop` first (a
// test can have an agent report its exit right then); `forgotten` lists the
// ids forget() was told about; log_complete() is false for the ids in
// `log_lagging` (a backend whose copy of the log trails the exit report).
#pragma once

#include <atomic>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "workers/backend.h"

namespace muster::testing {

class FakeBackend final : public workers::Backend {
 public:
  std::string name() const override { return "fake"; }
  std::string master_address() const override { return "127.0.0.1"; }
  api::Status launch(const std::vector<workers::LaunchSpec>& specs) override {
    if (gate) {
      launching = true;
      gate->wait();
    }
    std::lock_guard<std::mutex> lock(mu);
    if (!fail_launch.is_ok()) return fail_launch;
    for (size_t i = 0; i < specs.size(); ++i) {
      const auto& s = specs[i];
      if (fail_at && i == *fail_at) {
        return api::unavailable("worker " + s.worker_id + " (" + std::to_string(i) + " of " +
                                std::to_string(specs.size()) + "): no room on the host");
      }
      if (unstartable.count(s.worker_id)) {
        for (size_t j = 0; j < i; ++j) {
          stopped.push_back(specs[j].worker_id);
          running.erase(specs[j].worker_id);
          states[specs[j].worker_id] = {workers::ProcessState::kExited, 137};
        }
        return api::unavailable("worker " + s.worker_id + ": its agent cannot start");
      }
      launched.push_back(s);
      running.insert(s.worker_id);
      states[s.worker_id] = {workers::ProcessState::kRunning, std::nullopt};
    }
    return api::Status::ok();
  }
  api::Status stop(const std::string& id, std::chrono::milliseconds) override {
    if (on_stop) on_stop(id);
    std::lock_guard<std::mutex> lock(mu);
    if (refuse_stop.count(id)) return api::internal_error("scancel of worker " + id + " failed: connection refused");
    stopped.push_back(id);
    running.erase(id);
    if (states.count(id)) states[id] = {workers::ProcessState::kExited, 143};
    return api::Status::ok();
  }
  workers::ProcessStatus poll(const std::string& id) override {
    std::lock_guard<std::mutex> lock(mu);
    auto it = states.find(id);
    return it == states.end() ? workers::ProcessStatus{} : it->second;
  }
  std::string process_identity(const std::string& id) override {
    std::lock_guard<std::mutex> lock(mu);
    return states.count(id) ? "fake:" + id : "";
  }
  // A restarted daemon's backend: the worker runs on (the fake knows no
  // more of it than the identity).
  void adopt(const std::string& id, const std::string& identity) override {
    std::lock_guard<std::mutex> lock(mu);
    if (identity != "fake:" + id || states.count(id)) return;
    states[id] = {workers::ProcessState::kRunning, std::nullopt};
    running.insert(id);
  }
  void forget(const std::string& id) override {
    std::lock_guard<std::mutex> lock(mu);
    forgotten.push_back(id);
    states.erase(id);
    running.erase(id);
  }
  bool log_complete(const std::string& id) override {
    std::lock_guard<std::mutex> lock(mu);
    return !log_lagging.count(id);
  }
  void shutdown() override {}

  void set_exited(const std::string& id, int code) {
    std::lock_guard<std::mutex> lock(mu);
    states[id] = {workers::ProcessState::kExited, code};
  }
  // Makes launch() wait until open_gate().
  void close_gate() {
    promise = std::make_unique<std::promise<void>>();
    gate = std::make_unique<std::shared_future<void>>(promise->get_future().share());
    gate_open = false;
  }
  void open_gate() {
    if (promise && !gate_open) promise->set_value();
    gate_open = true;
  }

  std::mutex mu;
  api::Status fail_launch;
  std::optional<size_t> fail_at;
  std::unique_ptr<std::promise<void>> promise;
  std::unique_ptr<std::shared_future<void>> gate;
  bool gate_open = true;
  std::atomic<bool> launching{false};
  std::vector<workers::LaunchSpec> launched;
  std::set<std::string> running;
  std::vector<std::string> stopped;
  std::set<std::string> unstartable;
  std::set<std::string> refuse_stop;
  std::function<void(const std::string&)> on_stop;
  std::vector<std::string> forgotten;
  std::set<std::string> log_lagging;
  std::map<std::string, workers::ProcessStatus> states;
};

}  // namespace muster::testing
