// What the registry_*_test files share: a WorkerRegistry on a FakeBackend
// and a FakeClock, over a Store, with its state and project in a TempDir of
// its own. A test sets options_ (the defaults below: synchronous backend
// calls, a fake agent path and port) and calls start(); launch_running(n)
// gives n workers whose agents have registered.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "fake_backend.h"
#include "service/registry/registry.h"
#include "service/store.h"
#include "temp_dir.h"

namespace muster::testing {

class RegistryFixture : public ::testing::Test {
 protected:
  explicit RegistryFixture(const std::string& tag) : dir_(tag) {
    options_.state_dir = dir_.path();
    options_.project_dir = dir_.path();
    options_.agent_path = "/bin/muster-agent";
    options_.daemon_port = 9;
    options_.async_backend = false;
  }
  void TearDown() override { registry_.reset(); }

  // A registry from options_, over a fresh store at `db` (replacing any
  // registry and store the test had).
  void start(const std::string& db = ":memory:") {
    registry_.reset();
    store_.reset();
    auto store = service::Store::open(db);
    ASSERT_TRUE(store.is_ok()) << store.status().message();
    store_ = std::move(store).value();
    registry_ = std::make_unique<service::WorkerRegistry>(options_, backend_, store_.get(), clock_);
  }

  // n workers of train.py, each registered from `ip`.
  std::vector<std::string> launch_running(int n, const std::string& ip = "10.0.0.1") {
    service::LaunchBatch b;
    b.request.n = n;
    b.request.script = "train.py";
    b.request.script_path = dir_.path() / "train.py";
    auto launched = registry_->launch(b);
    EXPECT_TRUE(launched.is_ok()) << launched.status().message();
    std::vector<std::string> ids;
    if (!launched.is_ok()) return ids;
    for (const auto& w : launched.value()) {
      EXPECT_TRUE(registry_->agent_register(w.id, ip, std::nullopt).is_ok());
      ids.push_back(w.id);
    }
    return ids;
  }
  api::WorkerStatus status(const std::string& id) { return registry_->get(id)->status; }

  TempDir dir_;
  service::RegistryOptions options_;
  service::FakeClock clock_;
  FakeBackend backend_;
  std::unique_ptr<service::Store> store_;
  std::unique_ptr<service::WorkerRegistry> registry_;
};

}  // namespace muster::testing
