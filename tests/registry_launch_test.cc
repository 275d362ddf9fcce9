// WorkerRegistry::launch() off the caller's thread: launch answers
// once the records are stored and the backend work is queued; the backend
// step keeps the launch all-or-nothing; a daemon that dies mid-launch leaves
// no record in `scheduling` and no agent that may run. The backend is
// tests/fake_backend.h, gated so that the test decides when it returns.
#include <chrono>
#include <filesystem>
#include <future>
#include <thread>

#include <gtest/gtest.h>

#include "registry_fixture.h"

using namespace std::chrono_literals;
using muster::api::ErrorCode;
using muster::api::WorkerStatus;
using muster::service::LaunchBatch;
using muster::service::RegistryOptions;
using muster::service::WorkerRegistry;
using muster::testing::FakeBackend;

namespace {

class RegistryLaunchTest : public muster::testing::RegistryFixture {
 protected:
  RegistryLaunchTest() : RegistryFixture("muster-registry-launch") {}
  void SetUp() override {
    options_.async_backend = true;  // launches run on the registry's threads, as in musterd
    options_.stop_grace = 0ms;
    start();
  }
  void TearDown() override {
    backend_.open_gate();  // a launch thread still waiting must end
    registry_.reset();
  }
  std::vector<std::string> launch(int n) {
    LaunchBatch b;
    b.request.n = n;
    b.request.code = "print(1)";
    auto r = registry_->launch(b);
    EXPECT_TRUE(r.is_ok()) << r.status().message();
    std::vector<std::string> ids;
    if (r) {
      for (const auto& w : r.value()) ids.push_back(w.id);
    }
    return ids;
  }
  std::string stored_status(const std::string& id) {
    const auto rows = store_->load_all();
    for (const auto& row : rows.value()) {
      if (row.id == id) return row.record["worker"]["status"];
    }
    return "(not stored)";
  }
  void wait_until_backend_called() {
    const auto deadline = std::chrono::steady_clock::now() + 5s;
    while (!backend_.launching && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(1ms);
    ASSERT_TRUE(backend_.launching) << "the launch never reached the backend";
  }
};

TEST_F(RegistryLaunchTest, LaunchAnswersBeforeTheBackendAndOtherCallsAreServed) {
  backend_.close_gate();  // the backend takes "forever" to start the workers
  auto launched = std::async(std::launch::async, [&] { return launch(4); });
  ASSERT_EQ(launched.wait_for(2s), std::future_status::ready) << "launch() waited for the backend";
  const auto ids = launched.get();
  ASSERT_EQ(ids.size(), 4u);
  wait_until_backend_called();
  // While the backend works: the records are stored, reads and other calls are answered.
  auto calls = std::async(std::launch::async, [&] {
    for (const auto& id : ids) {
      EXPECT_EQ(status(id), WorkerStatus::kScheduling);
      EXPECT_EQ(stored_status(id), "scheduling");
    }
    EXPECT_EQ(registry_->list().size(), 4u);
    EXPECT_EQ(launch(1).size(), 1u);  // a second launch does not queue behind the first's backend call
  });
  ASSERT_EQ(calls.wait_for(2s), std::future_status::ready) << "registry calls waited for the backend";
  calls.get();
  registry_->tick();  // and tick() leaves a launching worker alone
  EXPECT_EQ(status(ids[0]), WorkerStatus::kScheduling);

  backend_.open_gate();
  registry_->wait_for_launches();
  for (const auto& id : ids) {
    EXPECT_EQ(status(id), WorkerStatus::kStarting);
    EXPECT_EQ(stored_status(id), "starting");
  }
  EXPECT_EQ(backend_.running.size(), 5u);
}

// The backend fails on worker k of n after starting 0..k-1 (and leaves them
// running): every worker of the launch is stopped and ends failed with the
// backend's reason; an await on them answers with the failures.
TEST_F(RegistryLaunchTest, ABackendFailureOnWorkerKOfNFailsAllAndLeavesNothingRunning) {
  backend_.fail_at = 2;
  const auto ids = launch(5);
  ASSERT_EQ(ids.size(), 5u);
  registry_->wait_for_launches();
  const std::string reason = "worker " + ids[2] + " (2 of 5): no room on the host";
  for (const auto& id : ids) {
    const auto w = registry_->get(id).value();
    EXPECT_EQ(w.status, WorkerStatus::kFailed) << id;
    EXPECT_NE(w.reason.find(reason), std::string::npos) << w.reason;
    EXPECT_EQ(stored_status(id), "failed");
  }
  EXPECT_TRUE(backend_.running.empty()) << "a started worker of the failed launch still runs";
  EXPECT_GE(backend_.stopped.size(), 2u);

  std::promise<muster::service::AwaitResult> got;
  muster::api::AwaitRequest await;
  await.ids = ids;
  ASSERT_TRUE(registry_->await_workers(await, [&](muster::service::AwaitResult r) { got.set_value(r); }).is_ok());
  auto result = got.get_future().get();
  EXPECT_TRUE(result.workers.empty());
  EXPECT_EQ(result.failures.size(), 5u);
}

// A daemon that dies while the backend works (here: a second registry
// restores the first's store while the first's backend call has not
// returned): the new daemon fails the `scheduling` records and refuses
// their agents, so none runs its script; nothing stays `scheduling`.
TEST_F(RegistryLaunchTest, ARestartMidLaunchFailsTheRecordsAndRefusesTheirAgents) {
  backend_.close_gate();
  const auto ids = launch(3);
  wait_until_backend_called();
  FakeBackend fresh;
  RegistryOptions o = options_;
  o.async_backend = false;
  WorkerRegistry restarted(o, fresh, store_.get(), clock_);
  ASSERT_TRUE(restarted.restore().is_ok());
  for (const auto& id : ids) {
    const auto w = restarted.get(id).value();
    EXPECT_EQ(w.status, WorkerStatus::kFailed);
    EXPECT_EQ(w.reason, "the daemon restarted before the worker was launched");
    auto reg = restarted.agent_register(id, "127.0.0.1", std::nullopt);
    ASSERT_FALSE(reg.is_ok());
    EXPECT_EQ(reg.status().code(), ErrorCode::kConflict);
  }
  EXPECT_TRUE(fresh.launched.empty());
}

// A worker stopped while its launch is with the backend is stopped again
// once the backend has started it; the others of the launch go on.
TEST_F(RegistryLaunchTest, AStopDuringTheLaunchReachesTheWorkerOnceStarted) {
  backend_.close_gate();
  const auto ids = launch(2);
  wait_until_backend_called();
  ASSERT_TRUE(registry_->stop({ids[0]}).is_ok());
  EXPECT_EQ(status(ids[0]), WorkerStatus::kStopped);
  backend_.open_gate();
  registry_->wait_for_launches();
  // The stop runs on the registry's stop thread.
  const auto deadline = std::chrono::steady_clock::now() + 5s;
  while (std::chrono::steady_clock::now() < deadline) {
    {
      std::lock_guard<std::mutex> lock(backend_.mu);
      if (!backend_.running.count(ids[0])) break;
    }
    std::this_thread::sleep_for(1ms);
  }
  std::lock_guard<std::mutex> lock(backend_.mu);
  EXPECT_EQ(backend_.running.count(ids[0]), 0u);
  EXPECT_EQ(backend_.running.count(ids[1]), 1u);
  EXPECT_EQ(status(ids[1]), WorkerStatus::kStarting);
  EXPECT_EQ(status(ids[0]), WorkerStatus::kStopped);
}

// An agent that registers before the backend call returned is running, and
// stays so when the launch step ends.
TEST_F(RegistryLaunchTest, AnAgentMayRegisterBeforeTheLaunchStepEnds) {
  backend_.close_gate();
  const auto ids = launch(1);
  wait_until_backend_called();
  ASSERT_TRUE(registry_->agent_register(ids[0], "10.0.0.3", std::nullopt).is_ok());
  EXPECT_EQ(status(ids[0]), WorkerStatus::kRunning);
  backend_.open_gate();
  registry_->wait_for_launches();
  EXPECT_EQ(status(ids[0]), WorkerStatus::kRunning);
  EXPECT_EQ(stored_status(ids[0]), "running");
}

// Input errors are still answered at once, with nothing launched.
TEST_F(RegistryLaunchTest, BadInputLaunchesNothing) {
  LaunchBatch b;
  b.request.n = 2;
  b.request.code = "print(1)";
  b.per_worker.resize(1);
  auto r = registry_->launch(b);
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), ErrorCode::kInvalidArgument);
  b.per_worker.clear();
  b.request.nvidia_gpu = 1;  // this registry has no GPUs
  r = registry_->launch(b);
  ASSERT_FALSE(r.is_ok());
  registry_->wait_for_launches();
  EXPECT_TRUE(registry_->list().empty());
  EXPECT_TRUE(store_->load_all()->empty());
  EXPECT_TRUE(backend_.launched.empty());
}

}  // namespace
