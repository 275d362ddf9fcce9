// WorkerRegistry with a backend whose copy of a worker's log trails the
// agent's exit report (Backend::log_complete; kubernetes follows the pod's
// log from the kubelet): the exit is held until the log is complete, or for
// log_drain_timeout at most, so an await that answers and a failure's reason
// see the whole log; a stop of a held worker applies its exit; a backend
// without the lag holds nothing.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "registry_fixture.h"

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using muster::api::WorkerStatus;
using muster::service::AwaitResult;

namespace {

class RegistryLogDrainTest : public muster::testing::RegistryFixture {
 protected:
  RegistryLogDrainTest() : RegistryFixture("muster-registry-drain") {}
  void SetUp() override {
    options_.heartbeat_timeout = 5s;
    options_.log_drain_timeout = 3s;
    start();
  }

  std::string running() { return launch_running(1).at(0); }
  // Awaits `id`'s completion; the answer lands in `*out` when it comes.
  void await_completion(const std::string& id, std::optional<AwaitResult>* out) {
    muster::api::AwaitRequest q;
    q.ids = {id};
    q.wait_for_completion = true;
    q.timeout_seconds = 600;
    ASSERT_TRUE(registry_->await_workers(q, [out](AwaitResult r) { *out = std::move(r); }).is_ok());
  }
  void append_log(const std::string& id, const std::string& text) {
    std::ofstream(registry_->log_path(id).value(), std::ios::app) << text;
  }
};

TEST_F(RegistryLogDrainTest, AnExitIsHeldUntilTheBackendsLogIsComplete) {
  const auto id = running();
  std::optional<AwaitResult> answer;
  await_completion(id, &answer);
  backend_.log_lagging = {id};
  ASSERT_TRUE(registry_->agent_exit(id, 0).is_ok());
  EXPECT_EQ(status(id), WorkerStatus::kRunning) << "held: the log is not all there";
  EXPECT_TRUE(registry_->agent_exit(id, 0).is_ok()) << "a repeated report is no error";
  // The pod is seen ended meanwhile: no "the agent's report did not arrive".
  backend_.set_exited(id, 0);
  clock_.advance(1s);
  registry_->tick();
  EXPECT_EQ(status(id), WorkerStatus::kRunning);
  EXPECT_FALSE(answer);
  backend_.log_lagging.clear();
  registry_->tick();
  const auto w = registry_->get(id).value();
  EXPECT_EQ(w.status, WorkerStatus::kSucceeded);
  EXPECT_EQ(w.reason, "");
  EXPECT_EQ(w.exit_code, 0);
  ASSERT_TRUE(answer);
  ASSERT_EQ(answer->workers.size(), 1u);
  EXPECT_TRUE(answer->failures.empty());
}

TEST_F(RegistryLogDrainTest, AHeldExitIsAppliedAtTheBoundWhateverTheBackendSays) {
  const auto id = running();
  backend_.log_lagging = {id};
  ASSERT_TRUE(registry_->agent_exit(id, 3).is_ok());
  clock_.advance(2999ms);
  registry_->tick();
  EXPECT_EQ(status(id), WorkerStatus::kRunning);
  clock_.advance(1ms);
  registry_->tick();
  const auto w = registry_->get(id).value();
  EXPECT_EQ(w.status, WorkerStatus::kFailed);
  EXPECT_EQ(w.exit_code, 3);
  EXPECT_EQ(w.reason, "the script exited with code 3");
}

// The failure's reason comes from the log as it is once complete: the
// exception the kubelet delivered after the exit report is named.
TEST_F(RegistryLogDrainTest, TheReasonNamesTheExceptionThatArrivedAfterTheReport) {
  const auto id = running();
  backend_.log_lagging = {id};
  ASSERT_TRUE(registry_->agent_exit(id, 1, /*out_of_memory=*/true).is_ok());
  append_log(id, "Traceback (most recent call last):\n  File \"train.py\", line 3, in <module>\n"
                 "KeyError: 'config'\n");
  backend_.log_lagging.clear();
  registry_->tick();
  const auto w = registry_->get(id).value();
  EXPECT_EQ(w.status, WorkerStatus::kFailed);
  EXPECT_NE(w.reason.find("out of memory"), std::string::npos) << w.reason;
  EXPECT_NE(w.reason.find("the script exited with code 1: KeyError: 'config'"), std::string::npos) << w.reason;
}

// A worker that ended before the stop came ends as it did, as on a backend
// whose report is never held: the stop does not signal it.
TEST_F(RegistryLogDrainTest, AStopOfAHeldWorkerAppliesItsExit) {
  const auto id = running();
  backend_.log_lagging = {id};
  ASSERT_TRUE(registry_->agent_exit(id, 0).is_ok());
  auto stopped = registry_->stop({id});
  ASSERT_TRUE(stopped.is_ok()) << stopped.status().message();
  ASSERT_EQ(stopped.value().size(), 1u);
  EXPECT_EQ(stopped.value()[0].status, WorkerStatus::kSucceeded);
  EXPECT_TRUE(backend_.stopped.empty());
  registry_->tick();
  EXPECT_EQ(status(id), WorkerStatus::kSucceeded);
}

// An exit reported while a stop signals the worker is the stop's: nothing
// is held for the log then.
TEST_F(RegistryLogDrainTest, AnExitDuringAStopIsNotHeld) {
  const auto id = running();
  backend_.log_lagging = {id};
  backend_.on_stop = [this](const std::string& w) { EXPECT_TRUE(registry_->agent_exit(w, 143).is_ok()); };
  ASSERT_TRUE(registry_->stop({id}, "replaced").is_ok());
  const auto w = registry_->get(id).value();
  EXPECT_EQ(w.status, WorkerStatus::kStopped);
  EXPECT_EQ(w.reason, "replaced");
}

TEST_F(RegistryLogDrainTest, ABackendWithoutTheLagHoldsNothing) {
  const auto id = running();
  std::optional<AwaitResult> answer;
  await_completion(id, &answer);
  ASSERT_TRUE(registry_->agent_exit(id, 0).is_ok());
  EXPECT_EQ(status(id), WorkerStatus::kSucceeded);
  ASSERT_TRUE(answer);
  EXPECT_EQ(answer->workers.size(), 1u);
}

}  // namespace
