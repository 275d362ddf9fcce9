// WorkerRegistry's stop path and its clocks, with a FakeClock and a
// FakeBackend: a report that races a stop, a backend that cannot stop a
// worker, heartbeats stamped when they arrive, and a wall clock that jumps
// (NTP, a resumed VM) without expiring anything.
#include <gtest/gtest.h>

#include <filesystem>

#include "registry_fixture.h"

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using muster::api::ErrorCode;
using muster::api::WorkerStatus;
using muster::service::AwaitResult;
using muster::service::LaunchBatch;

namespace {

class RegistryStopTest : public muster::testing::RegistryFixture {
 protected:
  RegistryStopTest() : RegistryFixture("muster-registry-stop") {}
  void SetUp() override {
    options_.startup_timeout = 10s;
    options_.heartbeat_timeout = 5s;
    start();
  }
  std::vector<std::string> running(int n) { return launch_running(n); }
};

// The agent's exit report can land while stop() signals the tree (the script
// dies of the SIGTERM at once): the worker ends `stopped` with the stop's
// reason, not `failed` with "killed by signal 15".
TEST_F(RegistryStopTest, AnExitReportedWhileStoppingEndsTheWorkerStopped) {
  const auto ids = running(2);
  backend_.on_stop = [this](const std::string& id) {
    EXPECT_TRUE(registry_->agent_exit(id, 143).is_ok());
    // While it is being stopped, the agent may not register or heartbeat.
    EXPECT_EQ(registry_->agent_heartbeat(id).status().code(), ErrorCode::kConflict);
  };
  auto stopped = registry_->stop({ids[0]}, "replaced by the cluster");
  ASSERT_TRUE(stopped.is_ok()) << stopped.status().message();
  const auto w = registry_->get(ids[0]).value();
  EXPECT_EQ(w.status, WorkerStatus::kStopped);
  EXPECT_EQ(w.reason, "replaced by the cluster");
  EXPECT_EQ(w.exit_code, 143);
  EXPECT_EQ(status(ids[1]), WorkerStatus::kRunning) << "only the named worker";
}

// A backend that cannot signal a worker (a failed scancel) must not leave it
// shown as stopped while it runs: it keeps its status and the call names it.
TEST_F(RegistryStopTest, AWorkerTheBackendCannotStopKeepsItsStatusAndIsNamed) {
  const auto ids = running(3);
  backend_.refuse_stop = {ids[1]};
  auto stopped = registry_->stop(ids);
  ASSERT_FALSE(stopped.is_ok());
  EXPECT_EQ(stopped.status().code(), ErrorCode::kInternal);
  EXPECT_NE(stopped.status().message().find(ids[1]), std::string::npos) << stopped.status().message();
  EXPECT_NE(stopped.status().message().find("scancel"), std::string::npos) << stopped.status().message();
  EXPECT_EQ(status(ids[0]), WorkerStatus::kStopped);
  EXPECT_EQ(status(ids[1]), WorkerStatus::kRunning);
  EXPECT_EQ(status(ids[2]), WorkerStatus::kStopped);
  // It can still be stopped once the backend can.
  backend_.refuse_stop.clear();
  ASSERT_TRUE(registry_->stop({ids[1]}).is_ok());
  EXPECT_EQ(status(ids[1]), WorkerStatus::kStopped);
}

// A heartbeat counts from when it arrived, not from when a handler thread
// got to it: one that waited 3 s in a queue still keeps its worker alive.
TEST_F(RegistryStopTest, HeartbeatsAreStampedWhenTheyArrive) {
  const auto id = running(1)[0];
  clock_.advance(4s);
  ASSERT_TRUE(registry_->agent_heartbeat(id).is_ok());  // t=4
  clock_.advance(4s);                                    // t=8: one sent at t=5 is handled only now
  ASSERT_TRUE(registry_->agent_heartbeat(id, 3s).is_ok());
  registry_->tick();
  EXPECT_EQ(status(id), WorkerStatus::kRunning);
  clock_.advance(2500ms);  // t=10.5: 5.5 s after the heartbeat's arrival, over the 5 s timeout
  registry_->tick();
  EXPECT_EQ(status(id), WorkerStatus::kLost) << "stamped at handling (t=8) it would still count as alive";
  // An older heartbeat handled late never moves the stamp back.
  const auto other = running(1)[0];
  ASSERT_TRUE(registry_->agent_heartbeat(other, 60s).is_ok());
  registry_->tick();
  EXPECT_EQ(status(other), WorkerStatus::kRunning);
}

// Every deadline runs on the monotonic clock: the wall clock stepping an
// hour forward or back (NTP, a suspended VM) expires nothing, while the
// times the API shows follow the wall clock.
TEST_F(RegistryStopTest, AMovedWallClockExpiresNothing) {
  const auto ids = running(2);
  LaunchBatch b;
  b.request.n = 1;
  b.request.script = "train.py";
  b.request.script_path = dir_.path() / "train.py";
  const auto starting = registry_->launch(b).value()[0].id;  // never registers
  std::optional<AwaitResult> awaited;
  muster::api::AwaitRequest await;
  await.ids = {starting};
  await.wait_for_completion = false;
  await.timeout_seconds = 30;
  ASSERT_TRUE(registry_->await_workers(await, [&](AwaitResult r) { awaited = std::move(r); }).is_ok());

  clock_.step_wall(1h);
  registry_->tick();
  clock_.step_wall(-2h);
  registry_->tick();
  for (const auto& id : ids) EXPECT_EQ(status(id), WorkerStatus::kRunning);
  EXPECT_EQ(status(starting), WorkerStatus::kStarting);
  EXPECT_FALSE(awaited) << "an await of 30 s ended when the wall clock moved";

  // The monotonic clock alone decides: 6 s later, past the heartbeat timeout.
  clock_.advance(6s);
  registry_->tick();
  for (const auto& id : ids) EXPECT_EQ(status(id), WorkerStatus::kLost);
  EXPECT_EQ(status(starting), WorkerStatus::kStarting);
  clock_.advance(25s);
  registry_->tick();
  ASSERT_TRUE(awaited);
  EXPECT_EQ(status(starting), WorkerStatus::kTimedOut);
  // Displayed times are the wall clock's (an hour behind where it started).
  const auto finished = muster::api::parse_rfc3339(*registry_->get(ids[0])->finished_at);
  ASSERT_TRUE(finished);
  EXPECT_LT(*finished, clock_.wall() + 1s);
  EXPECT_GT(*finished, clock_.wall() - 60s);
}

}  // namespace
