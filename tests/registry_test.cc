// WorkerRegistry with a FakeClock and a FakeBackend: the status state
// machine, await semantics, timeouts, agent calls, clusters' hold/release
// and restore from the store. Nothing forks or sleeps.
#include "service/registry/registry.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>

#include "fake_backend.h"

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using muster::api::ErrorCode;
using muster::api::WorkerStatus;
using muster::service::AwaitResult;
using muster::service::FakeClock;
using muster::service::LaunchBatch;
using muster::service::RegistryOptions;
using muster::service::Store;
using muster::service::WorkerRegistry;
using muster::testing::FakeBackend;

namespace {

TEST(StateMachine, Transitions) {
  using S = WorkerStatus;
  const std::vector<S> all = {S::kScheduling, S::kStarting, S::kRunning, S::kSucceeded,
                              S::kFailed,     S::kTimedOut, S::kStopped, S::kLost};
  const std::set<std::pair<S, S>> allowed = {
      {S::kScheduling, S::kStarting}, {S::kScheduling, S::kFailed}, {S::kScheduling, S::kStopped},
      {S::kStarting, S::kRunning},    {S::kStarting, S::kFailed},   {S::kStarting, S::kTimedOut},
      {S::kStarting, S::kStopped},    {S::kStarting, S::kLost},     {S::kRunning, S::kSucceeded},
      {S::kRunning, S::kFailed},      {S::kRunning, S::kStopped},   {S::kRunning, S::kLost},
  };
  for (S from : all) {
    for (S to : all) {
      EXPECT_EQ(muster::api::can_transition(from, to), allowed.count({from, to}) == 1)
          << muster::api::worker_status_name(from) << " -> " << muster::api::worker_status_name(to);
    }
  }
  for (S s : all) {
    EXPECT_EQ(muster::api::parse_worker_status(muster::api::worker_status_name(s)), s);
  }
}

class RegistryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/muster-registry-XXXXXX";
    dir_ = mkdtemp(tmpl);
    options_.state_dir = dir_;
    options_.project_dir = dir_;
    options_.agent_path = "/bin/muster-agent";
    options_.daemon_port = 9;
    options_.startup_timeout = 10s;
    options_.heartbeat_timeout = 5s;
    options_.release_poll = 25s;
    options_.async_backend = false;
    auto store = Store::open(":memory:");
    ASSERT_TRUE(store.is_ok());
    store_ = std::move(store).value();
    registry_ = std::make_unique<WorkerRegistry>(options_, backend_, store_.get(), clock_);
  }
  void TearDown() override {
    registry_.reset();
    fs::remove_all(dir_);
  }

  std::vector<std::string> launch(int n, std::optional<std::string> cluster = std::nullopt,
                                  std::vector<muster::service::WorkerExtras> extras = {}) {
    LaunchBatch b;
    b.request.n = n;
    b.request.cpu = 0.5;
    b.request.memory = 2;
    b.request.script = "train.py";
    b.request.script_path = dir_ / "train.py";
    b.request.env = {{"LR", "0.1"}};
    b.cluster_id = cluster;
    b.per_worker = std::move(extras);
    auto r = registry_->launch(b);
    EXPECT_TRUE(r.is_ok()) << r.status().message();
    std::vector<std::string> ids;
    for (const auto& w : r.value()) ids.push_back(w.id);
    return ids;
  }
  WorkerStatus status(const std::string& id) { return registry_->get(id)->status; }

  // Starts an await and returns the slot its result lands in.
  std::shared_ptr<std::optional<AwaitResult>> await(std::vector<std::string> ids, bool completion, double timeout) {
    auto slot = std::make_shared<std::optional<AwaitResult>>();
    muster::api::AwaitRequest req;
    req.ids = std::move(ids);
    req.wait_for_completion = completion;
    req.timeout_seconds = timeout;
    EXPECT_TRUE(registry_->await_workers(req, [slot](AwaitResult r) { *slot = std::move(r); }).is_ok());
    return slot;
  }

  fs::path dir_;
  RegistryOptions options_;
  FakeClock clock_;
  FakeBackend backend_;
  std::unique_ptr<Store> store_;
  std::unique_ptr<WorkerRegistry> registry_;
};

TEST_F(RegistryTest, LaunchGivesStartingWorkersAndAgentSpecs) {
  auto ids = launch(3);
  ASSERT_EQ(ids.size(), 3u);
  ASSERT_EQ(backend_.launched.size(), 3u);
  for (size_t i = 0; i < ids.size(); ++i) {
    auto w = registry_->get(ids[i]);
    ASSERT_TRUE(w.is_ok());
    EXPECT_EQ(w->status, WorkerStatus::kStarting);
    EXPECT_EQ(w->ip_address, "unknown");
    EXPECT_FALSE(w->cluster_id.has_value());
    const auto& spec = backend_.launched[i];
    EXPECT_EQ(spec.worker_id, ids[i]);
    EXPECT_EQ(spec.env.at("MUSTER_WORKER_ID"), ids[i]);
    EXPECT_EQ(spec.env.at("MUSTER_URL"), "http://127.0.0.1:9");
    EXPECT_EQ(spec.env.at("LR"), "0.1");
    EXPECT_EQ(registry_->worker_for_agent_token(spec.env.at("MUSTER_AGENT_TOKEN")), ids[i]);
    EXPECT_EQ(spec.agent_argv.at(0), "/bin/muster-agent");
    EXPECT_EQ(spec.log_path, dir_ / "workers" / ids[i] / "output.log");
  }
  EXPECT_FALSE(registry_->worker_for_agent_token("nope").has_value());
  EXPECT_EQ(registry_->list().size(), 3u);
  EXPECT_EQ(registry_->list()[2].id, ids[2]);  // launch order
}

// The records are stored before the backend is asked; a backend that
// refuses the batch fails every worker of it, with its reason.
TEST_F(RegistryTest, FailedBackendLaunchFailsEveryWorkerWithItsReason) {
  backend_.fail_launch = muster::api::unavailable("the host is out of memory");
  LaunchBatch b;
  b.request.n = 2;
  b.request.code = "print(1)";
  auto r = registry_->launch(b);
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  ASSERT_EQ(r->size(), 2u);
  for (const auto& w : registry_->list()) {
    EXPECT_EQ(w.status, WorkerStatus::kFailed);
    EXPECT_NE(w.reason.find("the host is out of memory"), std::string::npos) << w.reason;
  }
  const auto rows = store_->load_all();
  ASSERT_EQ(rows->size(), 2u);
  for (const auto& row : rows.value()) EXPECT_EQ(row.record["worker"]["status"], "failed");
  EXPECT_TRUE(backend_.running.empty());
}

TEST_F(RegistryTest, AgentLifecycle) {
  auto ids = launch(1);
  const auto id = ids[0];
  auto hold = registry_->agent_register(id, "10.0.0.5", std::nullopt);
  ASSERT_TRUE(hold.is_ok());
  EXPECT_FALSE(hold->hold);
  EXPECT_EQ(status(id), WorkerStatus::kRunning);
  EXPECT_EQ(registry_->get(id)->ip_address, "10.0.0.5");
  EXPECT_TRUE(registry_->get(id)->started_at.has_value());
  EXPECT_TRUE(registry_->agent_heartbeat(id).is_ok());
  EXPECT_TRUE(registry_->agent_exit(id, 0).is_ok());
  EXPECT_EQ(status(id), WorkerStatus::kSucceeded);
  EXPECT_EQ(registry_->get(id)->exit_code, 0);
  EXPECT_TRUE(registry_->get(id)->finished_at.has_value());
  // Terminal: the agent is told to go away.
  EXPECT_EQ(registry_->agent_heartbeat(id).status().code(), ErrorCode::kConflict);
  EXPECT_EQ(registry_->agent_exit(id, 1).code(), ErrorCode::kConflict);
  EXPECT_EQ(registry_->agent_register(id, "10.0.0.5", std::nullopt).status().code(), ErrorCode::kConflict);
  EXPECT_EQ(registry_->agent_heartbeat("missing").status().code(), ErrorCode::kNotFound);
}

TEST_F(RegistryTest, NonZeroExitFailsWithReason) {
  auto id = launch(1)[0];
  ASSERT_TRUE(registry_->agent_register(id, "127.0.0.1", std::nullopt).is_ok());
  ASSERT_TRUE(registry_->agent_exit(id, 3).is_ok());
  auto w = registry_->get(id).value();
  EXPECT_EQ(w.status, WorkerStatus::kFailed);
  EXPECT_EQ(w.exit_code, 3);
  EXPECT_NE(w.reason.find("code 3"), std::string::npos) << w.reason;
}

// The agent's cgroup said the OOM killer struck: the reason names the limit;
// a SIGKILL alone is no out of memory.
TEST_F(RegistryTest, OutOfMemoryExitNamesTheLimitAndLimitsAreRecorded) {
  auto ids = launch(2);
  const std::map<std::string, std::string> limits = {{"cpu", "enforced by cgroup v1"},
                                                     {"memory", "enforced by cgroup v1"}};
  ASSERT_TRUE(registry_->agent_register(ids[0], "127.0.0.1", std::nullopt, limits).is_ok());
  EXPECT_EQ(registry_->get(ids[0])->limits, limits);
  EXPECT_EQ(muster::api::to_json(*registry_->get(ids[0]))["limits"]["cpu"], "enforced by cgroup v1");
  ASSERT_TRUE(registry_->agent_exit(ids[0], 137, true).is_ok());
  auto w = registry_->get(ids[0]).value();
  EXPECT_EQ(w.status, WorkerStatus::kFailed);
  EXPECT_EQ(w.reason.rfind("out of memory (limit 2 GiB)", 0), 0u) << w.reason;
  EXPECT_NE(w.reason.find("signal 9"), std::string::npos) << w.reason;
  // An older agent: no limits reported, none recorded; SIGKILL is not guessed to be OOM.
  ASSERT_TRUE(registry_->agent_register(ids[1], "127.0.0.1", std::nullopt).is_ok());
  EXPECT_TRUE(registry_->get(ids[1])->limits.empty());
  ASSERT_TRUE(registry_->agent_exit(ids[1], 137).is_ok());
  EXPECT_EQ(registry_->get(ids[1])->reason.find("out of memory"), std::string::npos);
}

TEST_F(RegistryTest, AwaitRunningNeedsIp) {
  auto ids = launch(2);
  auto slot = await(ids, /*completion=*/false, 60);
  EXPECT_FALSE(slot->has_value());
  ASSERT_TRUE(registry_->agent_register(ids[1], "127.0.0.2", std::nullopt).is_ok());
  EXPECT_FALSE(slot->has_value());
  ASSERT_TRUE(registry_->agent_register(ids[0], "127.0.0.1", std::nullopt).is_ok());
  // Running counts once the script has run for await_settle (1 s).
  EXPECT_FALSE(slot->has_value());
  clock_.advance(999ms);
  registry_->tick();
  EXPECT_FALSE(slot->has_value());
  clock_.advance(1ms);
  registry_->tick();
  ASSERT_TRUE(slot->has_value());
  const auto& r = **slot;
  ASSERT_EQ(r.workers.size(), 2u);
  EXPECT_EQ(r.workers[0].id, ids[0]);  // request order
  EXPECT_EQ(r.workers[0].ip_address, "127.0.0.1");
  EXPECT_TRUE(r.failures.empty());
}

// A script that dies at once (say, `import muster` failing) is reported as the
// failure it is, with its exit code, not as running.
TEST_F(RegistryTest, AwaitRunningReportsAScriptThatDiedAtOnceAsAFailure) {
  auto ids = launch(2);
  auto slot = await(ids, /*completion=*/false, 60);
  for (const auto& id : ids) ASSERT_TRUE(registry_->agent_register(id, "127.0.0.1", std::nullopt).is_ok());
  clock_.advance(300ms);
  ASSERT_TRUE(registry_->agent_exit(ids[1], 1).is_ok());
  EXPECT_FALSE(slot->has_value());
  clock_.advance(700ms);
  registry_->tick();
  ASSERT_TRUE(slot->has_value());
  ASSERT_EQ((*slot)->workers.size(), 1u);
  EXPECT_EQ((*slot)->workers[0].id, ids[0]);
  ASSERT_EQ((*slot)->failures.size(), 1u);
  EXPECT_EQ((*slot)->failures[0].id, ids[1]);
  EXPECT_EQ((*slot)->failures[0].status, WorkerStatus::kFailed);
  EXPECT_EQ((*slot)->failures[0].exit_code, 1);
}

// A script that succeeds within the settle time while awaited was running
// (what ended before the await is still no success: see
// SucceededWhileWaitingForRunningIsAFailure).
TEST_F(RegistryTest, AwaitRunningCountsAQuickSuccessAsRunning) {
  auto ids = launch(1);
  auto slot = await(ids, /*completion=*/false, 60);
  ASSERT_TRUE(registry_->agent_register(ids[0], "127.0.0.1", std::nullopt).is_ok());
  clock_.advance(200ms);
  ASSERT_TRUE(registry_->agent_exit(ids[0], 0).is_ok());
  ASSERT_TRUE(slot->has_value());
  ASSERT_EQ((*slot)->workers.size(), 1u);
  EXPECT_EQ((*slot)->workers[0].status, WorkerStatus::kSucceeded);
  EXPECT_TRUE((*slot)->failures.empty());
}

// A held cluster task has not started its script: running counts at once.
TEST_F(RegistryTest, AwaitRunningCountsHeldWorkersAtOnce) {
  auto ids = launch(1, "c-1", {{{}, /*hold=*/true, false}});
  auto slot = await(ids, /*completion=*/false, 60);
  ASSERT_TRUE(registry_->agent_register(ids[0], "127.0.0.1", std::nullopt).is_ok());
  ASSERT_TRUE(slot->has_value());
  EXPECT_EQ((*slot)->workers.size(), 1u);
}

TEST_F(RegistryTest, AwaitCompletionSortsFailures) {
  auto ids = launch(3);
  for (const auto& id : ids) ASSERT_TRUE(registry_->agent_register(id, "127.0.0.1", std::nullopt).is_ok());
  auto slot = await(ids, /*completion=*/true, 60);
  ASSERT_TRUE(registry_->agent_exit(ids[0], 0).is_ok());
  ASSERT_TRUE(registry_->agent_exit(ids[1], 7).is_ok());
  EXPECT_FALSE(slot->has_value());
  ASSERT_TRUE(registry_->stop({ids[2]}).is_ok());
  ASSERT_TRUE(slot->has_value());
  ASSERT_EQ((*slot)->workers.size(), 1u);
  EXPECT_EQ((*slot)->workers[0].id, ids[0]);
  ASSERT_EQ((*slot)->failures.size(), 2u);
  EXPECT_EQ((*slot)->failures[0].exit_code, 7);
  EXPECT_EQ((*slot)->failures[1].status, WorkerStatus::kStopped);
  EXPECT_EQ(backend_.stopped, std::vector<std::string>{ids[2]});
}

TEST_F(RegistryTest, SucceededWhileWaitingForRunningIsAFailure) {
  auto id = launch(1)[0];
  ASSERT_TRUE(registry_->agent_register(id, "127.0.0.1", std::nullopt).is_ok());
  ASSERT_TRUE(registry_->agent_exit(id, 0).is_ok());
  auto slot = await({id}, /*completion=*/false, 60);
  ASSERT_TRUE(slot->has_value());
  EXPECT_TRUE((*slot)->workers.empty());
  ASSERT_EQ((*slot)->failures.size(), 1u);
  EXPECT_EQ((*slot)->failures[0].status, WorkerStatus::kSucceeded);
}

TEST_F(RegistryTest, AwaitTimesOutOnTheClock) {
  auto ids = launch(2);
  ASSERT_TRUE(registry_->agent_register(ids[0], "127.0.0.1", std::nullopt).is_ok());
  auto slot = await(ids, /*completion=*/false, 3);
  registry_->tick();
  EXPECT_FALSE(slot->has_value());
  clock_.advance(2999ms);
  registry_->tick();
  EXPECT_FALSE(slot->has_value());
  clock_.advance(1ms);
  registry_->tick();
  ASSERT_TRUE(slot->has_value());
  ASSERT_EQ((*slot)->workers.size(), 1u);
  ASSERT_EQ((*slot)->failures.size(), 1u);
  EXPECT_EQ((*slot)->failures[0].id, ids[1]);
  EXPECT_EQ((*slot)->failures[0].reason, "timed out (still starting)");
  EXPECT_EQ((*slot)->failures[0].status, WorkerStatus::kStarting);
  // The worker itself is untouched.
  EXPECT_EQ(status(ids[1]), WorkerStatus::kStarting);
  // Awaited for completion, a running worker times out still running, and runs on.
  slot = await({ids[0]}, /*completion=*/true, 1);
  clock_.advance(1s);
  registry_->tick();
  ASSERT_TRUE(slot->has_value());
  ASSERT_EQ((*slot)->failures.size(), 1u);
  EXPECT_EQ((*slot)->failures[0].reason, "timed out (still running)");
  EXPECT_EQ((*slot)->failures[0].status, WorkerStatus::kRunning);
  EXPECT_EQ(status(ids[0]), WorkerStatus::kRunning);
}

TEST_F(RegistryTest, ZeroTimeoutWaitsForever) {
  auto id = launch(1)[0];
  options_.startup_timeout = 10s;
  auto slot = await({id}, false, 0);
  ASSERT_TRUE(registry_->agent_register(id, "127.0.0.1", std::nullopt).is_ok());
  // Keep heartbeating while a day passes.
  for (int i = 0; i < 24 * 60; ++i) {
    clock_.advance(1min);
    ASSERT_TRUE(registry_->agent_heartbeat(id).is_ok());
    registry_->tick();
  }
  ASSERT_TRUE(slot->has_value());  // settled at registration, not by time
  auto slot2 = await({id}, true, 0);
  clock_.advance(24h);
  ASSERT_TRUE(registry_->agent_heartbeat(id).is_ok());
  registry_->tick();
  EXPECT_FALSE(slot2->has_value());
  ASSERT_TRUE(registry_->agent_exit(id, 0).is_ok());
  EXPECT_TRUE(slot2->has_value());
}

TEST_F(RegistryTest, AwaitUnknownIdIsNotFound) {
  muster::api::AwaitRequest req;
  req.ids = {"nope"};
  bool called = false;
  auto s = registry_->await_workers(req, [&](AwaitResult) { called = true; });
  EXPECT_EQ(s.code(), ErrorCode::kNotFound);
  EXPECT_FALSE(called);
}

TEST_F(RegistryTest, ManyConcurrentAwaitsAllComplete) {
  auto ids = launch(4);
  std::vector<std::shared_ptr<std::optional<AwaitResult>>> slots;
  for (int i = 0; i < 32; ++i) slots.push_back(await(ids, i % 2 == 0, 60));
  for (const auto& id : ids) ASSERT_TRUE(registry_->agent_register(id, "127.0.0.1", std::nullopt).is_ok());
  clock_.advance(1s);  // the await settle time
  registry_->tick();
  for (int i = 0; i < 32; ++i) EXPECT_EQ(slots[i]->has_value(), i % 2 == 1) << i;
  for (const auto& id : ids) ASSERT_TRUE(registry_->agent_exit(id, 0).is_ok());
  for (int i = 0; i < 32; ++i) {
    ASSERT_TRUE(slots[i]->has_value()) << i;
    EXPECT_EQ((*slots[i])->workers.size(), 4u);
  }
}

TEST_F(RegistryTest, StartupTimeout) {
  auto id = launch(1)[0];
  clock_.advance(10s);
  registry_->tick();
  EXPECT_EQ(status(id), WorkerStatus::kStarting);
  clock_.advance(1ms);
  registry_->tick();
  EXPECT_EQ(status(id), WorkerStatus::kTimedOut);
  EXPECT_NE(registry_->get(id)->reason.find("startup timeout"), std::string::npos);
  EXPECT_EQ(backend_.stopped, std::vector<std::string>{id});
}

TEST_F(RegistryTest, MissedHeartbeatsMeanLost) {
  auto id = launch(1)[0];
  ASSERT_TRUE(registry_->agent_register(id, "127.0.0.1", std::nullopt).is_ok());
  clock_.advance(4s);
  ASSERT_TRUE(registry_->agent_heartbeat(id).is_ok());
  clock_.advance(4s);
  registry_->tick();
  EXPECT_EQ(status(id), WorkerStatus::kRunning);
  clock_.advance(2s);
  registry_->tick();
  EXPECT_EQ(status(id), WorkerStatus::kLost);
  EXPECT_EQ(backend_.stopped, std::vector<std::string>{id});
}

// registry.h, "Heartbeats at fleet scale": past heartbeat_rate beats a
// second the interval every reply gives stretches to running / rate, and a
// worker's loss timeout counts in the interval it was told.
TEST_F(RegistryTest, HeartbeatBudgetStretchesTheIntervalAndTheLossTimeout) {
  registry_.reset();
  options_.heartbeat_interval = 2s;
  options_.heartbeat_timeout = 5s;
  options_.heartbeat_rate = 1;  // one beat a second: more than 2 running stretch it
  registry_ = std::make_unique<WorkerRegistry>(options_, backend_, store_.get(), clock_);
  auto ids = launch(4);
  EXPECT_EQ(registry_->heartbeat_interval_now(), 2s);
  auto first = registry_->agent_register(ids[0], "127.0.0.1", std::nullopt);
  ASSERT_TRUE(first.is_ok());
  EXPECT_EQ(first->heartbeat, 2s);  // 1 running: within the budget at the base interval
  for (int i = 1; i < 4; ++i) ASSERT_TRUE(registry_->agent_register(ids[i], "127.0.0.1", std::nullopt).is_ok());
  EXPECT_EQ(registry_->running_workers(), 4u);
  EXPECT_EQ(registry_->heartbeat_interval_now(), 4s);
  for (const auto& id : ids) {
    auto every = registry_->agent_heartbeat(id);
    ASSERT_TRUE(every.is_ok());
    EXPECT_EQ(every.value(), 4s);
  }
  // Told 4 s, each is lost after 5 s x 4 / 2 = 10 s without a beat, not 5.
  clock_.advance(9s);
  registry_->tick();
  for (const auto& id : ids) EXPECT_EQ(status(id), WorkerStatus::kRunning);
  clock_.advance(1001ms);
  registry_->tick();
  for (const auto& id : ids) {
    EXPECT_EQ(status(id), WorkerStatus::kLost);
    EXPECT_EQ(registry_->get(id)->reason, "no heartbeat from the agent for 10 s");
  }
  // The lost ones no longer count: the budget is back at the base interval.
  EXPECT_EQ(registry_->running_workers(), 0u);
  EXPECT_EQ(registry_->heartbeat_interval_now(), 2s);
}

TEST_F(RegistryTest, HeartbeatBudgetFollowsTheRunningCount) {
  registry_.reset();
  options_.heartbeat_interval = 2s;
  options_.heartbeat_rate = 1;
  registry_ = std::make_unique<WorkerRegistry>(options_, backend_, store_.get(), clock_);
  auto ids = launch(6);
  for (const auto& id : ids) ASSERT_TRUE(registry_->agent_register(id, "127.0.0.1", std::nullopt).is_ok());
  EXPECT_EQ(registry_->heartbeat_interval_now(), 6s);
  ASSERT_TRUE(registry_->agent_exit(ids[0], 0).is_ok());  // succeeded
  ASSERT_TRUE(registry_->agent_exit(ids[1], 1).is_ok());  // failed
  ASSERT_TRUE(registry_->stop({ids[2]}).is_ok());
  EXPECT_EQ(registry_->running_workers(), 3u);
  EXPECT_EQ(registry_->heartbeat_interval_now(), 3s);
  EXPECT_EQ(registry_->agent_heartbeat(ids[3]).value(), 3s);
  // The budget off: the base interval however many run.
  registry_.reset();
  options_.heartbeat_rate = 0;
  registry_ = std::make_unique<WorkerRegistry>(options_, backend_, store_.get(), clock_);
  ASSERT_TRUE(registry_->restore().is_ok());
  EXPECT_EQ(registry_->running_workers(), 3u);  // restored running records are counted
  EXPECT_EQ(registry_->heartbeat_interval_now(), 2s);
}

// A restarted daemon does not know what the last one told each agent: it
// assumes what its own budget gives the restored fleet, so agents beating at
// a stretched interval are not lost before their first beat reaches it.
TEST_F(RegistryTest, ARestartedDaemonCountsLossInTheIntervalItsBudgetGives) {
  registry_.reset();
  options_.heartbeat_interval = 2s;
  options_.heartbeat_timeout = 5s;
  options_.heartbeat_rate = 1;
  registry_ = std::make_unique<WorkerRegistry>(options_, backend_, store_.get(), clock_);
  auto ids = launch(4);
  for (const auto& id : ids) ASSERT_TRUE(registry_->agent_register(id, "127.0.0.1", std::nullopt).is_ok());
  for (const auto& id : ids) EXPECT_EQ(registry_->agent_heartbeat(id).value(), 4s);
  registry_.reset();
  registry_ = std::make_unique<WorkerRegistry>(options_, backend_, store_.get(), clock_);
  ASSERT_TRUE(registry_->restore().is_ok());
  clock_.advance(9s);  // past 5 s, within 5 s x 4 / 2
  registry_->tick();
  for (const auto& id : ids) EXPECT_EQ(status(id), WorkerStatus::kRunning);
  clock_.advance(1001ms);
  registry_->tick();
  for (const auto& id : ids) EXPECT_EQ(status(id), WorkerStatus::kLost);
}

TEST_F(RegistryTest, AgentThatDiesWithoutReportingFails) {
  auto id = launch(1)[0];
  ASSERT_TRUE(registry_->agent_register(id, "127.0.0.1", std::nullopt).is_ok());
  backend_.set_exited(id, 137);
  registry_->tick();
  EXPECT_EQ(status(id), WorkerStatus::kFailed);
  EXPECT_EQ(registry_->get(id)->exit_code, 137);
}

TEST_F(RegistryTest, StopAllStopsOnlyUnfinished) {
  auto ids = launch(3);
  ASSERT_TRUE(registry_->agent_register(ids[0], "127.0.0.1", std::nullopt).is_ok());
  ASSERT_TRUE(registry_->agent_exit(ids[0], 0).is_ok());
  auto stopped = registry_->stop({});
  ASSERT_TRUE(stopped.is_ok());
  ASSERT_EQ(stopped->size(), 2u);
  for (const auto& w : stopped.value()) EXPECT_EQ(w.status, WorkerStatus::kStopped);
  EXPECT_EQ(status(ids[0]), WorkerStatus::kSucceeded);
  EXPECT_EQ(registry_->stop({"nope"}).status().code(), ErrorCode::kNotFound);
  EXPECT_EQ(registry_->get(ids[1])->reason, "stopped through the API");
}

// A cluster stops its tasks with its own outcome as their reason.
TEST_F(RegistryTest, StopWithAReasonSaysIt) {
  auto ids = launch(2);
  auto stopped = registry_->stop({ids[0]}, "cluster c-1a2b succeeded");
  ASSERT_TRUE(stopped.is_ok());
  EXPECT_EQ(stopped->at(0).reason, "cluster c-1a2b succeeded");
  EXPECT_EQ(registry_->get(ids[0])->reason, "cluster c-1a2b succeeded");
  EXPECT_EQ(status(ids[1]), WorkerStatus::kStarting);
}

// Workers find muster's Python parts after the user's own PYTHONPATH, and
// run the interpreter the request names.
TEST_F(RegistryTest, LaunchGivesWorkersMustersPythonAndTheirInterpreter) {
  registry_.reset();
  options_.worker_python.sdk_dir = dir_ / "sdk";
  options_.worker_python.runtime_dir = dir_ / "ext";
  registry_ = std::make_unique<WorkerRegistry>(options_, backend_, store_.get(), clock_);
  LaunchBatch b;
  b.request.n = 1;
  b.request.script = "train.py";
  b.request.script_path = dir_ / "train.py";
  b.request.env = {{"PYTHONPATH", "/mine"}};
  b.request.python = "/venv/bin/python";
  ASSERT_TRUE(registry_->launch(b).is_ok());
  ASSERT_EQ(backend_.launched.size(), 1u);
  const auto& spec = backend_.launched[0];
  EXPECT_EQ(spec.env.at("PYTHONPATH"), "/mine:" + (dir_ / "sdk").string());
  EXPECT_EQ(spec.env.at("MUSTER_RUNTIME_PATH"), (dir_ / "ext").string());
  const auto python = std::find(spec.agent_argv.begin(), spec.agent_argv.end(), "--python");
  ASSERT_NE(python, spec.agent_argv.end());
  EXPECT_EQ(*(python + 1), "/venv/bin/python");
}

TEST_F(RegistryTest, HoldReleaseAndSubscribe) {
  std::vector<std::pair<std::string, WorkerStatus>> seen;
  int handle = registry_->subscribe([&](const muster::api::Worker& w) { seen.emplace_back(w.id, w.status); });
  std::vector<muster::service::WorkerExtras> extras(2);
  extras[0].hold = true;
  extras[0].reserve_port = true;
  extras[0].env = {{"ROLE", "ps"}};
  auto ids = launch(2, "c1", extras);
  EXPECT_EQ(registry_->get(ids[0])->cluster_id, "c1");
  EXPECT_EQ(backend_.launched[0].env.at("MUSTER_RESERVE_PORT"), "1");
  EXPECT_EQ(backend_.launched[0].env.at("ROLE"), "ps");
  EXPECT_EQ(backend_.launched[1].env.count("MUSTER_RESERVE_PORT"), 0u);
  auto hold = registry_->agent_register(ids[0], "127.0.0.1", 4242);
  ASSERT_TRUE(hold.is_ok());
  EXPECT_TRUE(hold->hold);
  EXPECT_EQ(registry_->get(ids[0])->port, 4242);
  EXPECT_FALSE(registry_->agent_register(ids[1], "127.0.0.1", std::nullopt).value().hold);

  std::optional<std::optional<muster::service::Release>> got;
  ASSERT_TRUE(registry_->agent_wait_release(ids[0], [&](auto r) { got = std::move(r); }).is_ok());
  EXPECT_FALSE(got.has_value());
  // The long-poll ends empty at its bound; the agent asks again.
  clock_.advance(25s);
  ASSERT_TRUE(registry_->agent_heartbeat(ids[0]).is_ok());
  registry_->tick();
  ASSERT_TRUE(got.has_value());
  EXPECT_FALSE(got->has_value());
  got.reset();
  ASSERT_TRUE(registry_->agent_wait_release(ids[0], [&](auto r) { got = std::move(r); }).is_ok());
  EXPECT_EQ(registry_->release(ids[0], {{{"TF_CONFIG", "{}"}}, {{"../x", "no"}}}).code(),
            ErrorCode::kInvalidArgument);
  ASSERT_TRUE(registry_->release(ids[0], {{{"TF_CONFIG", "{}"}}, {{"cluster.json", "{}"}}}).is_ok());
  ASSERT_TRUE(got.has_value() && got->has_value());
  EXPECT_EQ((*got)->env.at("TF_CONFIG"), "{}");
  EXPECT_EQ((*got)->files.at("cluster.json"), "{}");
  EXPECT_EQ(registry_->release(ids[1], {}).code(), ErrorCode::kConflict);  // not held
  // Registering again after the release does not hold.
  EXPECT_FALSE(registry_->agent_register(ids[0], "127.0.0.1", 4242).value().hold);

  registry_->unsubscribe(handle);
  const auto before = seen.size();
  ASSERT_TRUE(registry_->stop({ids[1]}).is_ok());
  EXPECT_EQ(seen.size(), before);
  // scheduling, starting for both; running for both; the release update.
  EXPECT_GE(before, 6u);
  EXPECT_EQ(seen.front().second, WorkerStatus::kScheduling);
}

TEST_F(RegistryTest, RestoreKeepsStatusesAndAdoptsAgents) {
  auto ids = launch(3);
  ASSERT_TRUE(registry_->agent_register(ids[0], "127.0.0.1", std::nullopt).is_ok());
  ASSERT_TRUE(registry_->agent_exit(ids[0], 0).is_ok());
  ASSERT_TRUE(registry_->agent_register(ids[1], "127.0.0.9", std::nullopt).is_ok());
  const std::string token1 = backend_.launched[1].env.at("MUSTER_AGENT_TOKEN");
  registry_.reset();

  FakeBackend fresh;  // a new daemon's backend knows no process
  WorkerRegistry restored(options_, fresh, store_.get(), clock_);
  ASSERT_TRUE(restored.restore().is_ok());
  auto list = restored.list();
  ASSERT_EQ(list.size(), 3u);
  EXPECT_EQ(list[0].status, WorkerStatus::kSucceeded);
  EXPECT_EQ(list[1].status, WorkerStatus::kRunning);
  EXPECT_EQ(list[1].ip_address, "127.0.0.9");
  EXPECT_EQ(list[2].status, WorkerStatus::kStarting);
  EXPECT_EQ(restored.worker_for_agent_token(token1), ids[1]);
  // The running agent keeps heartbeating and is adopted; the starting one
  // never comes back and times out.
  clock_.advance(6s);
  ASSERT_TRUE(restored.agent_heartbeat(ids[1]).is_ok());
  restored.tick();
  EXPECT_EQ(restored.get(ids[1])->status, WorkerStatus::kRunning);
  clock_.advance(5s);
  ASSERT_TRUE(restored.agent_heartbeat(ids[1]).is_ok());
  restored.tick();
  EXPECT_EQ(restored.get(ids[2])->status, WorkerStatus::kTimedOut);
  ASSERT_TRUE(restored.agent_exit(ids[1], 0).is_ok());
  EXPECT_EQ(restored.get(ids[1])->status, WorkerStatus::kSucceeded);
}

// cdsw parity: the engine variables a ported worker script reads, and the
// worker dict's running_at / duration.
TEST_F(RegistryTest, WorkersGetCdswVariablesRunningAtAndDuration) {
  auto ids = launch(1);
  const auto& env = backend_.launched[0].env;
  EXPECT_EQ(env.at("CDSW_ENGINE_ID"), ids[0]);
  EXPECT_EQ(env.at("CDSW_MASTER_IP"), "127.0.0.1");
  EXPECT_EQ(env.at("CML_MASTER_IP"), "127.0.0.1");
  EXPECT_EQ(env.at("CDSW_PROJECT"), dir_.filename().string());
  EXPECT_EQ(env.at("CDSW_CPU_MILLICORES"), "500");
  EXPECT_EQ(env.at("CDSW_MEMORY_MB"), "2048");
  EXPECT_EQ(env.count("CDSW_IP_ADDRESS"), 0u);  // only the agent knows it

  auto starting = *registry_->get(ids[0]);
  auto j = muster::api::to_json(starting, clock_.wall());
  EXPECT_TRUE(j.at("running_at").is_null());
  EXPECT_TRUE(j.at("duration").is_null());

  clock_.advance(1500ms);
  ASSERT_TRUE(registry_->agent_register(ids[0], "10.0.0.5", std::nullopt).is_ok());
  auto running = *registry_->get(ids[0]);
  ASSERT_TRUE(running.running_at.has_value());
  EXPECT_EQ(running.running_at, running.started_at);
  clock_.advance(2250ms);
  j = muster::api::to_json(running, clock_.wall());
  EXPECT_DOUBLE_EQ(j.at("duration").get<double>(), 2.25);
  EXPECT_EQ(j.at("running_at"), *running.running_at);

  ASSERT_TRUE(registry_->agent_exit(ids[0], 0).is_ok());
  clock_.advance(60s);  // a finished worker's duration no longer grows
  j = muster::api::to_json(*registry_->get(ids[0]), clock_.wall());
  EXPECT_DOUBLE_EQ(j.at("duration").get<double>(), 2.25);
  // running_at survives the store (and records of older daemons fall back to started_at).
  auto back = muster::api::worker_from_json(j);
  ASSERT_TRUE(back.is_ok());
  EXPECT_EQ(back->running_at, running.running_at);
  j.erase("running_at");
  EXPECT_EQ(muster::api::worker_from_json(j)->running_at, running.started_at);
  EXPECT_EQ(muster::api::parse_rfc3339("2026-11-22T02:03:04.250Z").value().time_since_epoch(),
            std::chrono::system_clock::time_point(std::chrono::seconds(1795312984) + 250ms).time_since_epoch());
  EXPECT_FALSE(muster::api::parse_rfc3339("yesterday").has_value());
}

}  // namespace
