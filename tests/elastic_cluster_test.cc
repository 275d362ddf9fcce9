// Elastic clusters and max_restarts in the ClusterManager, driven step by
// step: a real WorkerRegistry over a fake backend, a FakeClock and a fake
// launcher, so nothing forks or sleeps. Agents and ranks are played by the
// test: the registry's agent_* calls and the World's join.
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <optional>
#include <regex>
#include <set>

#include <gtest/gtest.h>

#include "clusterspec/tf_config.h"
#include "service/cluster/manager.h"
#include "service/cluster/rendezvous_routes.h"

namespace muster::service {
namespace {

namespace fs = std::filesystem;
namespace proto = clusterspec::rendezvous;
using api::WorkerStatus;
using namespace std::chrono_literals;

class FakeBackend final : public workers::Backend {
 public:
  std::string name() const override { return "fake"; }
  std::string master_address() const override { return "127.0.0.1"; }
  api::Status launch(const std::vector<workers::LaunchSpec>& specs) override {
    for (const auto& s : specs) launched.push_back(s);
    return api::Status::ok();
  }
  api::Status stop(const std::string& id, std::chrono::milliseconds) override {
    stopped.insert(id);
    return api::Status::ok();
  }
  workers::ProcessStatus poll(const std::string&) override { return {workers::ProcessState::kRunning, {}}; }
  void shutdown() override {}

  std::vector<workers::LaunchSpec> launched;
  std::set<std::string> stopped;
};

struct FakeProcess final : LauncherProcess {
  std::optional<int>* exit_code;
  std::optional<int> poll() override { return *exit_code; }
  void terminate(std::chrono::milliseconds) override {
    if (!*exit_code) *exit_code = 143;
  }
};

struct FakeLauncher final : Launcher {
  std::vector<LauncherSpec> started;
  std::optional<int> exit_code;
  api::Result<std::unique_ptr<LauncherProcess>> start(const LauncherSpec& spec) override {
    started.push_back(spec);
    exit_code.reset();
    auto p = std::make_unique<FakeProcess>();
    p->exit_code = &exit_code;
    return std::unique_ptr<LauncherProcess>(std::move(p));
  }
};

class ElasticClusterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() / ("muster_ec_" + std::to_string(::getpid()) + "_" +
                                         ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root_);
    fs::create_directories(root_ / "project");
    fs::create_directories(root_ / "state");
    std::ofstream(root_ / "project" / "train.py") << "print('hi')\n";
    project_ = fs::canonical(root_ / "project");
    RegistryOptions ro;
    ro.state_dir = root_ / "state";
    ro.project_dir = project_;
    ro.agent_path = "/bin/true";
    ro.daemon_port = 7000;
    ro.async_backend = false;
    ro.metrics_token = [](const std::string& id) { return "token-of-" + id; };
    registry_ = std::make_unique<WorkerRegistry>(ro, backend_, nullptr, clock_);
    auto store = ClusterStore::open((root_ / "clusters.db").string());
    ASSERT_TRUE(store.is_ok());
    store_ = std::move(store).value();
    make_manager();
  }

  void TearDown() override {
    manager_.reset();
    registry_.reset();
    fs::remove_all(root_);
  }

  void make_manager() {
    manager_.reset();
    auto launcher = std::make_unique<FakeLauncher>();
    launcher_ = launcher.get();
    ClusterManagerOptions o;
    o.state_dir = root_ / "state";
    o.validation = {16, project_};
    o.ps_program = root_ / "no-such-muster-ps";
    o.start_thread = false;
    o.elastic_rejoin_timeout = 5s;
    manager_ = std::make_unique<ClusterManager>(o, *registry_, store_.get(), clock_, std::move(launcher));
  }

  static api::ClusterRequest elastic(int n, int min_np, int max_np) {
    api::ClusterRequest r;
    r.mode = api::ClusterKind::kElastic;
    r.n_workers = n;
    r.min_np = min_np;
    r.max_np = max_np;
    r.worker_script = "train.py";
    r.timeout_seconds = 30;
    return r;
  }

  api::Cluster create(const api::ClusterRequest& r) {
    auto c = manager_->create(r);
    EXPECT_TRUE(c.is_ok()) << c.status().message();
    return c.is_ok() ? c.value() : api::Cluster{};
  }
  api::Cluster now(const std::string& id) {
    manager_->step();
    return manager_->get(id).value();
  }
  api::Worker worker(const std::string& id) { return registry_->get(id).value(); }
  void register_worker(const std::string& id, const std::string& ip = "127.0.0.1") {
    auto held = registry_->agent_register(id, ip, std::nullopt);
    ASSERT_TRUE(held.is_ok()) << held.status().message();
  }
  std::optional<Release> release_of(const std::string& id) {
    std::optional<Release> got;
    auto s = registry_->agent_wait_release(id, [&](std::optional<Release> r) { got = std::move(r); });
    EXPECT_TRUE(s.is_ok()) << s.message();
    return got;
  }
  std::shared_ptr<elastic::World> world_of(const std::string& worker_id) {
    auto w = manager_->world_of_worker(worker_id);
    EXPECT_TRUE(w.is_ok()) << w.status().message();
    return w.is_ok() ? w.value() : nullptr;
  }
  // Ranks `ids` join after generation `seen`; returns their answers (all must come).
  std::vector<proto::Assignment> join_all(const std::vector<std::string>& ids, int seen) {
    std::vector<std::optional<api::Result<proto::Assignment>>> got(ids.size());
    for (size_t i = 0; i < ids.size(); ++i) {
      world_of(ids[i])->join(ids[i], {seen}, [&got, i](api::Result<proto::Assignment> r) { got[i] = std::move(r); });
    }
    std::vector<proto::Assignment> out;
    for (size_t i = 0; i < ids.size(); ++i) {
      EXPECT_TRUE(got[i] && got[i]->is_ok()) << ids[i] << (got[i] ? ": " + got[i]->status().message() : ": no answer");
      out.push_back(got[i] && got[i]->is_ok() ? got[i]->value() : proto::Assignment{});
    }
    return out;
  }
  // A running elastic cluster whose generation 1 formed.
  api::Cluster started(const api::ClusterRequest& r) {
    auto c = create(r);
    for (const auto& t : c.tasks) register_worker(t.worker_id);
    auto running = now(c.id);
    EXPECT_EQ(running.status, api::ClusterStatus::kRunning) << running.reason;
    std::vector<std::string> ids;
    for (const auto& t : c.tasks) ids.push_back(t.worker_id);
    join_all(ids, 0);
    return now(c.id);
  }
  static std::vector<std::string> ids_of(const api::Cluster& c) {
    std::vector<std::string> ids;
    for (const auto& t : c.tasks) ids.push_back(t.worker_id);
    return ids;
  }

  fs::path root_, project_;
  FakeClock clock_;
  FakeBackend backend_;
  std::unique_ptr<WorkerRegistry> registry_;
  std::unique_ptr<ClusterStore> store_;
  std::unique_ptr<ClusterManager> manager_;
  FakeLauncher* launcher_ = nullptr;
};

TEST_F(ElasticClusterTest, RanksAreReleasedIntoTheRendezvousAndFormGenerationOne) {
  auto c = create(elastic(3, 2, 4));
  ASSERT_EQ(c.tasks.size(), 3u);
  ASSERT_EQ(backend_.launched.size(), 3u);  // one worker per rank, no launcher
  for (const auto& spec : backend_.launched) EXPECT_EQ(spec.env.at("MUSTER_CLUSTER_ID"), c.id);  // set at launch
  for (const auto& t : c.tasks) register_worker(t.worker_id);
  auto running = now(c.id);
  ASSERT_EQ(running.status, api::ClusterStatus::kRunning) << running.reason;
  EXPECT_TRUE(launcher_->started.empty());
  for (const auto& t : c.tasks) {
    auto r = release_of(t.worker_id);
    ASSERT_TRUE(r.has_value());
    EXPECT_EQ(r->env.at("MUSTER_RENDEZVOUS_URL"), "http://127.0.0.1:7000");
    EXPECT_EQ(r->env.at("MUSTER_RENDEZVOUS_TOKEN"), "token-of-" + t.worker_id);
    EXPECT_EQ(r->env.at("MUSTER_ELASTIC_MIN_NP"), "2");
    EXPECT_EQ(r->env.at("MUSTER_ELASTIC_MAX_NP"), "4");
    EXPECT_EQ(r->env.at("MUSTER_RENDEZVOUS_TIMEOUT_MS"), "30000");
  }
  auto a = join_all(ids_of(c), 0);
  EXPECT_EQ(a[2].generation, 1);
  EXPECT_EQ(a[2].rank, 2);
  auto formed = now(c.id);
  ASSERT_EQ(formed.generations.size(), 1u);
  EXPECT_EQ(formed.generations[0].cause, "start");
  EXPECT_EQ(formed.generations[0].members, ids_of(c));
  EXPECT_EQ(formed.to_json()["generation"], 1);
  EXPECT_EQ(formed.to_json()["min_np"], 2);
  // A worker of another kind has no world.
  EXPECT_FALSE(manager_->world_of_worker("nobody").is_ok());
}

TEST_F(ElasticClusterTest, AKilledRankIsRecordedReplacedAndTheSurvivorsReform) {
  auto c = started(elastic(3, 2, 3));
  const auto ids = ids_of(c);
  ASSERT_TRUE(registry_->agent_exit(ids[1], 137).is_ok());
  auto after = now(c.id);
  ASSERT_EQ(after.status, api::ClusterStatus::kRunning) << after.reason;
  // The death, in generation 1, with its reason; a replacement under the same task index.
  ASSERT_EQ(after.generations.size(), 1u);
  const auto& g1 = after.generations[0];
  ASSERT_EQ(g1.deaths.size(), 1u);
  EXPECT_EQ(g1.deaths[0].worker_id, ids[1]);
  EXPECT_EQ(g1.deaths[0].task, "rank 1");
  EXPECT_EQ(g1.deaths[0].reason, "was killed by signal 9");
  EXPECT_EQ(g1.end_reason, "rank 1 (worker " + ids[1] + ") was killed by signal 9");
  ASSERT_TRUE(g1.ended_at.has_value());
  const std::string fresh = after.tasks[1].worker_id;
  EXPECT_NE(fresh, ids[1]);
  ASSERT_EQ(g1.replacements.size(), 1u);
  EXPECT_EQ(g1.replacements[0].replaced, ids[1]);
  EXPECT_EQ(g1.replacements[0].by, fresh);
  EXPECT_EQ(backend_.launched.size(), 4u);
  // The survivors re-form without it: generation 2, their order kept.
  clock_.advance(300ms);
  auto two = join_all({ids[2], ids[0]}, 1);
  EXPECT_EQ(two[1].generation, 2);
  EXPECT_EQ(two[1].rank, 0);
  EXPECT_EQ(two[0].rank, 1);
  auto reformed = now(c.id);
  ASSERT_EQ(reformed.generations.size(), 2u);
  EXPECT_EQ(reformed.generations[1].cause, "reset");
  EXPECT_EQ(reformed.resets, 1);
  ASSERT_TRUE(reformed.generations[1].recovery_seconds.has_value());
  EXPECT_NEAR(*reformed.generations[1].recovery_seconds, 0.3, 1e-6);
  // The replacement registers: released into the world; it waits, the survivors see the change.
  register_worker(fresh);
  now(c.id);
  auto r = release_of(fresh);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->env.at("MUSTER_RENDEZVOUS_TOKEN"), "token-of-" + fresh);
  std::optional<api::Result<proto::Assignment>> newcomer;
  world_of(fresh)->join(fresh, {0}, [&](api::Result<proto::Assignment> a) { newcomer = std::move(a); });
  EXPECT_FALSE(newcomer.has_value());
  std::optional<api::Result<proto::WorldView>> view;
  world_of(ids[0])->world(ids[0], 2, 0ms, [&](api::Result<proto::WorldView> v) { view = std::move(v); });
  ASSERT_TRUE(view && view->is_ok());
  EXPECT_TRUE(view->value().changed);
  auto three = join_all({ids[0], ids[2]}, 2);
  ASSERT_TRUE(newcomer && newcomer->is_ok());
  EXPECT_EQ(newcomer->value().generation, 3);
  EXPECT_EQ(newcomer->value().rank, 2);  // last: it has no state to give
  // The rank reports the batches it redid: in generation 3's history.
  ASSERT_TRUE(world_of(ids[0])->report(ids[0], {3, 4, true}).is_ok());
  auto done = now(c.id);
  ASSERT_EQ(done.generations.size(), 3u);
  EXPECT_EQ(done.generations[2].members, (std::vector<std::string>{ids[0], ids[2], fresh}));
  EXPECT_EQ(done.generations[2].batches_redone.value_or(-1), 4);
  // Everyone finishes: succeeded.
  for (const auto& id : {ids[0], ids[2], fresh}) ASSERT_TRUE(registry_->agent_exit(id, 0).is_ok());
  auto end = now(c.id);
  EXPECT_EQ(end.status, api::ClusterStatus::kSucceeded) << end.reason;
  // And the record says so after a restart of the daemon (the store).
  make_manager();
  ASSERT_TRUE(manager_->restore().is_ok());
  auto restored = manager_->get(c.id).value();
  EXPECT_EQ(restored.generations.size(), 3u);
  EXPECT_EQ(restored.generations[0].deaths[0].reason, "was killed by signal 9");
}

// A survivor that saw its peer fail asks for a new generation before the
// manager learns of the death: the history still puts the death first. A
// replacement's join is worded as a join, and the cluster's events tell it
// all in order, as they happen.
TEST_F(ElasticClusterTest, TheDeathComesFirstAndAJoinIsAJoin) {
  auto c = started(elastic(3, 2, 3));
  const auto ids = ids_of(c);
  // Rank 0 asks first (its collective failed on rank 2's broken link).
  std::optional<api::Result<proto::Assignment>> asked;
  world_of(ids[0])->join(ids[0], {1}, [&](api::Result<proto::Assignment> a) { asked = std::move(a); });
  auto broke = now(c.id);
  ASSERT_EQ(broke.generations.size(), 1u);
  EXPECT_EQ(broke.generations[0].end_reason, "rank 0 (worker " + ids[0] + ") asked to form a new generation");
  // 29 ms later its agent reports rank 2's death.
  clock_.advance(29ms);
  ASSERT_TRUE(registry_->agent_exit(ids[2], 137).is_ok());
  auto died = now(c.id);
  EXPECT_EQ(died.generations[0].end_reason, "rank 2 (worker " + ids[2] + ") was killed by signal 9; then rank 0 (worker " +
                                               ids[0] + ") asked to form a new generation");
  // The survivors re-form; the replacement joins afterwards.
  std::optional<api::Result<proto::Assignment>> second;
  world_of(ids[1])->join(ids[1], {1}, [&](api::Result<proto::Assignment> a) { second = std::move(a); });
  ASSERT_TRUE(asked && asked->is_ok() && second && second->is_ok());
  auto two = now(c.id);
  ASSERT_EQ(two.generations.size(), 2u);
  const std::string fresh = two.tasks[2].worker_id;
  register_worker(fresh);
  now(c.id);
  ASSERT_TRUE(release_of(fresh).has_value());
  std::optional<api::Result<proto::Assignment>> newcomer;
  world_of(fresh)->join(fresh, {0}, [&](api::Result<proto::Assignment> a) { newcomer = std::move(a); });
  auto three = join_all({ids[0], ids[1]}, 2);
  ASSERT_TRUE(newcomer && newcomer->is_ok());
  auto joined = now(c.id);
  ASSERT_EQ(joined.generations.size(), 3u);
  EXPECT_EQ(joined.generations[1].end_reason.rfind("replacement " + fresh + " is joining (rank ", 0), 0u)
      << joined.generations[1].end_reason;
  // The events: the death, going on without it, the replacement's join.
  const auto events = joined.to_json()["events"];
  ASSERT_EQ(events.size(), 3u) << events.dump();
  EXPECT_EQ(events[0]["kind"], "death");
  EXPECT_EQ(events[0]["text"], "rank 2 (worker " + ids[2] + ") was killed by signal 9");
  EXPECT_EQ(events[1]["text"], "going on with 2 ranks (generation 2)");
  EXPECT_EQ(events[2]["text"], "replacement " + fresh + " joined: 3 ranks (generation 3)");
}

TEST_F(ElasticClusterTest, PastResetLimitTheClusterFailsNamingTheDeaths) {
  auto r = elastic(2, 1, 2);
  r.reset_limit = 1;
  auto c = started(r);
  auto ids = ids_of(c);
  ASSERT_TRUE(registry_->agent_exit(ids[1], 1).is_ok());
  auto after = now(c.id);
  ASSERT_EQ(after.status, api::ClusterStatus::kRunning);
  join_all({ids[0]}, 1);  // one reset: generation 2
  EXPECT_EQ(now(c.id).resets, 1);
  ASSERT_TRUE(registry_->agent_exit(ids[0], 0 + 134).is_ok());  // rank 0 of generation 2 aborts
  auto failed = now(c.id);
  EXPECT_EQ(failed.status, api::ClusterStatus::kFailed);
  EXPECT_NE(failed.reason.find("reset_limit 1 reached"), std::string::npos) << failed.reason;
  EXPECT_NE(failed.reason.find("worker " + ids[1] + ") failed with exit code 1"), std::string::npos) << failed.reason;
  EXPECT_NE(failed.reason.find("killed by signal 6"), std::string::npos) << failed.reason;
  // Nothing is left running: the pending replacement was stopped.
  for (const auto& t : failed.tasks) EXPECT_TRUE(api::is_terminal(worker(t.worker_id).status)) << t.worker_id;
}

TEST_F(ElasticClusterTest, BelowMinNpForTheStartTimeoutFails) {
  auto r = elastic(2, 2, 2);
  r.start_timeout = 10;
  auto c = started(r);
  auto ids = ids_of(c);
  ASSERT_TRUE(registry_->agent_exit(ids[1], 1).is_ok());
  EXPECT_EQ(now(c.id).status, api::ClusterStatus::kRunning);  // a replacement is starting
  clock_.advance(9s);
  EXPECT_EQ(now(c.id).status, api::ClusterStatus::kRunning);
  clock_.advance(2s);  // it never registered
  auto failed = now(c.id);
  EXPECT_EQ(failed.status, api::ClusterStatus::kFailed);
  EXPECT_NE(failed.reason.find("fewer than min_np (2) ranks for 10 s"), std::string::npos) << failed.reason;
  EXPECT_NE(failed.reason.find("1 alive"), std::string::npos) << failed.reason;
}

TEST_F(ElasticClusterTest, WhenEveryMemberDiedNobodyHoldsTheStateAndTheClusterFails) {
  auto c = started(elastic(2, 1, 2));
  auto ids = ids_of(c);
  ASSERT_TRUE(registry_->agent_exit(ids[0], 137).is_ok());
  ASSERT_TRUE(registry_->agent_exit(ids[1], 137).is_ok());
  auto failed = now(c.id);
  EXPECT_EQ(failed.status, api::ClusterStatus::kFailed);
  EXPECT_NE(failed.reason.find("every rank of generation 1 died"), std::string::npos) << failed.reason;
}

TEST_F(ElasticClusterTest, EveryRankDyingBeforeTheFirstWorldFailsAtOnce) {
  auto c = create(elastic(2, 1, 2));
  for (const auto& t : c.tasks) register_worker(t.worker_id);
  ASSERT_EQ(now(c.id).status, api::ClusterStatus::kRunning);
  for (const auto& t : c.tasks) ASSERT_TRUE(registry_->agent_exit(t.worker_id, 1).is_ok());  // a broken script
  auto failed = now(c.id);
  EXPECT_EQ(failed.status, api::ClusterStatus::kFailed);
  EXPECT_NE(failed.reason.find("every rank died before the world first formed"), std::string::npos) << failed.reason;
  EXPECT_NE(failed.reason.find("failed with exit code 1"), std::string::npos) << failed.reason;
  EXPECT_EQ(backend_.launched.size(), 2u);  // no replacement for a job that never started
}

TEST_F(ElasticClusterTest, AHostThatKeepsFailingIsBlacklistedForItsCooldown) {
  auto r = elastic(2, 1, 2);
  r.blacklist_cooldown_range = std::make_pair(10, 20);
  auto c = started(r);
  auto ids = ids_of(c);
  ASSERT_TRUE(registry_->agent_exit(ids[1], 1).is_ok());  // failure 1 on 127.0.0.1: replaced
  auto one = now(c.id);
  const std::string fresh = one.tasks[1].worker_id;
  ASSERT_NE(fresh, ids[1]);
  register_worker(fresh);
  now(c.id);
  ASSERT_TRUE(registry_->agent_exit(fresh, 1).is_ok());  // failure 2: blacklisted, no replacement now
  auto two = now(c.id);
  EXPECT_EQ(two.tasks[1].worker_id, fresh);
  const auto blacklist = two.to_json()["blacklist"];
  ASSERT_EQ(blacklist.size(), 1u) << two.to_json().dump();
  EXPECT_EQ(blacklist[0]["host"], "127.0.0.1");
  EXPECT_EQ(blacklist[0]["times"], 1);
  // Horovod's cooldown: lo * 2 + U(0, lo) = 20..30 s, clamped to hi = 20 s.
  clock_.advance(19s);
  EXPECT_EQ(now(c.id).tasks[1].worker_id, fresh);
  clock_.advance(2s);
  auto later = now(c.id);
  EXPECT_NE(later.tasks[1].worker_id, fresh);  // the cooldown is over: replaced
  EXPECT_TRUE(later.to_json()["blacklist"].empty());
}

TEST_F(ElasticClusterTest, AHungMemberIsLeftOutAndStopped) {
  auto c = started(elastic(3, 2, 3));
  auto ids = ids_of(c);
  ASSERT_TRUE(registry_->agent_exit(ids[2], 137).is_ok());
  now(c.id);
  std::optional<api::Result<proto::Assignment>> a;
  world_of(ids[0])->join(ids[0], {1}, [&](api::Result<proto::Assignment> r) { a = std::move(r); });
  // The replacement registers and joins; ids[1] hangs and never rejoins.
  const std::string fresh = manager_->get(c.id).value().tasks[2].worker_id;
  register_worker(fresh);
  now(c.id);
  std::optional<api::Result<proto::Assignment>> b;
  world_of(fresh)->join(fresh, {0}, [&](api::Result<proto::Assignment> r) { b = std::move(r); });
  clock_.advance(6s);  // past the rejoin timeout
  auto left = now(c.id);
  ASSERT_TRUE(a && a->is_ok() && b && b->is_ok());
  EXPECT_EQ(a->value().generation, 2);
  EXPECT_EQ(b->value().rank, 1);
  EXPECT_TRUE(backend_.stopped.count(ids[1])) << "the hung rank is stopped";
  EXPECT_EQ(worker(ids[1]).status, WorkerStatus::kStopped);
  auto later = now(c.id);
  bool recorded = false;
  for (const auto& g : later.generations) {
    for (const auto& d : g.deaths) {
      if (d.worker_id == ids[1]) recorded = d.reason.find("did not join generation 2") != std::string::npos;
    }
  }
  EXPECT_TRUE(recorded) << later.to_json().dump();
}

TEST_F(ElasticClusterTest, ARestartedDaemonTakesARunningElasticClusterBack) {
  auto c = started(elastic(2, 1, 2));
  auto ids = ids_of(c);
  make_manager();  // the next daemon, same store and registry
  ASSERT_TRUE(manager_->restore().is_ok());
  auto back = manager_->get(c.id).value();
  EXPECT_EQ(back.status, api::ClusterStatus::kRunning) << back.reason;
  auto world = world_of(ids[0]);
  ASSERT_TRUE(world);
  EXPECT_EQ(world->generation(), 1);
  // Its key-value exchange is gone: a rank still connecting re-forms.
  EXPECT_NE(world->set(ids[0], {1, "k", "v"}).message().find("musterd restarted"), std::string::npos);
  auto two = join_all({ids[0], ids[1]}, 1);
  EXPECT_EQ(two[0].generation, 2);
  ASSERT_TRUE(registry_->agent_exit(ids[0], 0).is_ok());
  ASSERT_TRUE(registry_->agent_exit(ids[1], 0).is_ok());
  EXPECT_EQ(now(c.id).status, api::ClusterStatus::kSucceeded);
}

TEST_F(ElasticClusterTest, MpiClusterRestartsEveryTaskUnderMaxRestarts) {
  api::ClusterRequest r;
  r.mode = api::ClusterKind::kMpi;
  r.n_workers = 2;
  r.worker_script = "train.py";
  r.max_restarts = 1;
  auto c = create(r);
  for (const auto& t : c.tasks) register_worker(t.worker_id);
  ASSERT_EQ(now(c.id).status, api::ClusterStatus::kRunning);
  ASSERT_EQ(launcher_->started.size(), 1u);
  launcher_->exit_code = 1;  // mpirun: a rank died
  clock_.advance(1s);
  auto restarting = now(c.id);
  EXPECT_EQ(restarting.status, api::ClusterStatus::kRunning) << restarting.reason;
  EXPECT_EQ(restarting.restarts, 1);
  ASSERT_EQ(restarting.generations.size(), 2u);
  EXPECT_EQ(restarting.generations[0].end_reason.find("mpirun exited with code 1"), 0u)
      << restarting.generations[0].end_reason;
  EXPECT_EQ(restarting.generations[1].cause, "restart");
  EXPECT_NE(restarting.tasks[0].worker_id, c.tasks[0].worker_id);  // new workers
  for (const auto& t : c.tasks) EXPECT_EQ(worker(t.worker_id).status, WorkerStatus::kStopped);
  // The new tasks know which restart this is, then mpirun runs again.
  EXPECT_EQ(backend_.launched.back().env.at("MUSTER_RESTART_COUNT"), "1");
  clock_.advance(2s);
  for (const auto& t : restarting.tasks) register_worker(t.worker_id);
  auto again = now(c.id);
  ASSERT_EQ(launcher_->started.size(), 2u);
  EXPECT_EQ(launcher_->started[0].env.at("MUSTER_RESTART_COUNT"), "0");
  EXPECT_EQ(launcher_->started[1].env.at("MUSTER_RESTART_COUNT"), "1");  // the ranks see it through mpirun -x
  ASSERT_TRUE(again.generations[1].recovery_seconds.has_value());
  EXPECT_NEAR(*again.generations[1].recovery_seconds, 2.0, 1e-6);
  // A second failure: no restart left.
  launcher_->exit_code = 1;
  auto failed = now(c.id);
  EXPECT_EQ(failed.status, api::ClusterStatus::kFailed);
  EXPECT_NE(failed.reason.find("max_restarts 1 reached"), std::string::npos) << failed.reason;
}

TEST_F(ElasticClusterTest, PsWorkerIsReplacedAloneWithItsTfConfigButAPsTaskRestartsAll) {
  api::ClusterRequest r;
  r.mode = api::ClusterKind::kPs;
  r.n_ps = 1;
  r.n_workers = 2;
  r.worker_script = "train.py";
  r.max_restarts = 2;
  auto c = create(r);
  int port = 41000;
  for (const auto& t : c.tasks) ASSERT_TRUE(registry_->agent_register(t.worker_id, "127.0.0.1", port++).is_ok());
  ASSERT_EQ(now(c.id).status, api::ClusterStatus::kRunning);
  auto old_release = release_of(c.tasks[2].worker_id);  // worker 1
  ASSERT_TRUE(old_release.has_value());
  ASSERT_TRUE(registry_->agent_exit(c.tasks[2].worker_id, 1).is_ok());
  auto replaced = now(c.id);
  ASSERT_EQ(replaced.status, api::ClusterStatus::kRunning) << replaced.reason;
  EXPECT_EQ(replaced.restarts, 1);
  EXPECT_EQ(replaced.tasks[0].worker_id, c.tasks[0].worker_id);  // the PS task stays
  const std::string fresh = replaced.tasks[2].worker_id;
  ASSERT_NE(fresh, c.tasks[2].worker_id);
  EXPECT_EQ(replaced.tasks[2].index, 1);
  ASSERT_EQ(replaced.generations.size(), 1u);
  EXPECT_EQ(replaced.generations[0].replacements[0].by, fresh);
  ASSERT_TRUE(registry_->agent_register(fresh, "127.0.0.1", port++).is_ok());
  now(c.id);
  auto new_release = release_of(fresh);
  ASSERT_TRUE(new_release.has_value());
  EXPECT_EQ(new_release->env.at("TF_CONFIG"), old_release->env.at("TF_CONFIG"));
  EXPECT_EQ(new_release->env.at("MUSTER_PS_SECRET"), old_release->env.at("MUSTER_PS_SECRET"));
  // The PS task failing restarts every task.
  ASSERT_TRUE(registry_->agent_exit(c.tasks[0].worker_id, 1).is_ok());
  auto restarted = now(c.id);
  EXPECT_EQ(restarted.restarts, 2);
  ASSERT_EQ(restarted.generations.size(), 2u);
  EXPECT_EQ(restarted.generations[1].cause, "restart");
  for (size_t i = 0; i < 3; ++i) EXPECT_NE(restarted.tasks[i].worker_id, replaced.tasks[i].worker_id);
}

// The paths and methods api/openapi.yaml lists.
std::set<std::string> documented_routes() {
  std::ifstream in(std::string(std::getenv("MUSTER_SOURCE_DIR")) + "/api/openapi.yaml");
  std::set<std::string> out;
  std::string line, path;
  const std::regex path_re("^  (/[^:]*):\\s*$"), method_re("^    (get|post|put|delete|patch):\\s*$");
  std::smatch m;
  while (std::getline(in, line)) {
    if (std::regex_match(line, m, path_re)) {
      path = m[1];
    } else if (std::regex_match(line, m, method_re) && !path.empty()) {
      std::string method = m[1];
      for (auto& ch : method) ch = static_cast<char>(std::toupper(ch));
      out.insert(method + " " + path);
    }
  }
  return out;
}

TEST_F(ElasticClusterTest, RendezvousRoutesAreDocumentedAndSpeakTheProtocol) {
  Router router;
  register_rendezvous_routes(router, *manager_);
  const auto documented = documented_routes();
  ASSERT_EQ(router.routes().size(), 5u);
  for (const auto& r : router.routes()) {
    EXPECT_TRUE(documented.count(r.method + " " + r.pattern)) << r.method << " " << r.pattern << " is not documented";
    EXPECT_EQ(r.auth, AuthKind::kReport) << r.pattern;  // the rank's own worker, agent or script token
  }
  auto call = [&](const std::string& method, const std::string& path, nlohmann::json body,
                  std::map<std::string, std::string> query = {}) {
    auto match = router.match(method, path);
    EXPECT_TRUE(match.is_ok()) << method << " " << path;
    Request req;
    req.method = method;
    req.path = path;
    req.params = match->params;
    req.query = std::move(query);
    req.body = std::move(body);
    std::optional<Response> out;
    match->route->handler(req, [&](Response r) { out = std::move(r); });
    return out;
  };
  auto c = create(elastic(2, 1, 2));
  for (const auto& t : c.tasks) register_worker(t.worker_id);
  now(c.id);
  const std::string a = c.tasks[0].worker_id, b = c.tasks[1].worker_id;
  const std::string base = "/api/v1/agent/workers/";
  auto parked = call("POST", base + a + "/rendezvous/join", nullptr);  // an empty body: generation 0
  EXPECT_FALSE(parked.has_value());  // waits for b
  auto joined = call("POST", base + b + "/rendezvous/join", {{"generation", 0}});
  ASSERT_TRUE(joined);
  auto assignment = proto::assignment_from_json(nlohmann::json::parse(joined->body));
  EXPECT_EQ(assignment.generation, 1);
  EXPECT_EQ(assignment.rank, 1);
  auto set = call("POST", base + a + "/rendezvous/kv/set",
                  proto::to_json(proto::KvSet{1, assignment.prefix + "/x", std::string("\0bytes", 6)}));
  ASSERT_TRUE(set);
  EXPECT_EQ(set->http_status, 200) << set->body;
  auto got = call("POST", base + b + "/rendezvous/kv/get", proto::to_json(proto::KvGet{1, {assignment.prefix + "/x"}, 100}));
  ASSERT_TRUE(got);
  EXPECT_EQ(proto::kv_values_from_json(nlohmann::json::parse(got->body)).values[0], std::string("\0bytes", 6));
  auto view = call("GET", base + a + "/rendezvous/world", nullptr, {{"generation", "1"}, {"wait_ms", "0"}});
  ASSERT_TRUE(view);
  EXPECT_FALSE(proto::world_view_from_json(nlohmann::json::parse(view->body)).changed);
  // Refusals: a bad body (400 naming the rule), a bad query, a generation that is over (409).
  auto bad = call("POST", base + a + "/rendezvous/kv/set", {{"generation", 1}, {"key", "k"}, {"value", "%%"}});
  ASSERT_TRUE(bad);
  EXPECT_EQ(bad->http_status, 400);
  EXPECT_NE(bad->body.find("value must be base64"), std::string::npos) << bad->body;
  auto bad_query = call("GET", base + a + "/rendezvous/world", nullptr, {{"wait_ms", "99999"}});
  ASSERT_TRUE(bad_query);
  EXPECT_EQ(bad_query->http_status, 400);
  EXPECT_NE(bad_query->body.find("wait_ms"), std::string::npos);
  ASSERT_TRUE(registry_->agent_exit(b, 137).is_ok());
  now(c.id);
  auto stale = call("POST", base + a + "/rendezvous/kv/get", proto::to_json(proto::KvGet{1, {"k"}, 0}));
  ASSERT_TRUE(stale);
  EXPECT_EQ(stale->http_status, 409);
  EXPECT_NE(stale->body.find("generation 1 broke: rank 1 (worker " + b + ") was killed by signal 9"), std::string::npos)
      << stale->body;
  auto dead = call("POST", base + b + "/rendezvous/join", {{"generation", 1}});
  ASSERT_TRUE(dead);
  EXPECT_EQ(dead->http_status, 409);
  auto other = call("POST", base + std::string("nobody") + "/rendezvous/join", nullptr);
  ASSERT_TRUE(other);
  EXPECT_EQ(other->http_status, 404);
}

TEST(ElasticRequest, FieldsAreCheckedAndNamed) {
  struct Case {
    const char* body;
    const char* field;
    const char* message;
  };
  const Case cases[] = {
      {R"({"mode": "elastic", "n_workers": 2})", "worker_script", "required"},
      {R"({"mode": "elastic", "n_workers": 2, "worker_script": "t.py", "min_np": 3})", "min_np", "must be in 1..2"},
      {R"({"mode": "elastic", "n_workers": 2, "worker_script": "t.py", "max_np": 1})", "max_np", "at least n_workers (2)"},
      {R"({"mode": "elastic", "n_workers": 2, "worker_script": "t.py", "reset_limit": -1})", "reset_limit", "0.."},
      {R"({"mode": "elastic", "n_workers": 2, "worker_script": "t.py", "blacklist_cooldown_range": [5, 2]})",
       "blacklist_cooldown_range", "lo <= hi"},
      {R"({"mode": "elastic", "n_workers": 2, "worker_script": "t.py", "blacklist_cooldown_range": [1]})",
       "blacklist_cooldown_range", "[lo, hi]"},
      {R"({"mode": "elastic", "n_workers": 2, "worker_script": "t.py", "slots": 2})", "slots", "must be 1"},
      {R"({"mode": "elastic", "n_workers": 2, "worker_script": "t.py", "launch": false})", "launch", "must be true"},
      {R"({"mode": "elastic", "n_workers": 2, "worker_script": "t.py", "max_restarts": 2})", "max_restarts",
       "reset_limit"},
      {R"({"mode": "elastic", "n_workers": 2, "worker_script": "t.py", "fusion_threshold_mb": 4})",
       "fusion_threshold_mb", "no mpirun line"},
      {R"({"mode": "mpi", "n_workers": 2, "worker_script": "t.py", "min_np": 1})", "min_np", "elastic mode only"},
      {R"({"n_workers": 2, "reset_limit": 1})", "reset_limit", "elastic mode only"},
      {R"({"n_workers": 2, "max_restarts": 1001})", "max_restarts", "0..1000"},
  };
  for (const auto& c : cases) {
    auto r = api::parse_cluster_request(nlohmann::json::parse(c.body), 16);
    ASSERT_FALSE(r.is_ok()) << c.body;
    EXPECT_EQ(r.status().field(), c.field) << c.body << " -> " << r.status().message();
    EXPECT_NE(r.status().message().find(c.message), std::string::npos) << c.body << " -> " << r.status().message();
  }
  auto ok = api::parse_cluster_request(
      nlohmann::json::parse(R"({"mode": "elastic", "n_workers": 3, "worker_script": "t.py", "min_np": 2, "max_np": 5,
                                "reset_limit": 4, "blacklist_cooldown_range": [2, 30], "start_timeout": 20,
                                "network_interfaces": ["eth0"]})"),
      16);
  ASSERT_TRUE(ok.is_ok()) << ok.status().message();
  EXPECT_EQ(ok->mode, api::ClusterKind::kElastic);
  EXPECT_EQ(ok->min_np.value_or(0), 2);
  EXPECT_EQ(ok->max_np.value_or(0), 5);
  EXPECT_EQ(ok->reset_limit.value_or(0), 4);
  EXPECT_EQ(ok->blacklist_cooldown_range->second, 30);
  // The stored request reads back the same.
  auto back = api::cluster_request_from_json(ok->to_json());
  ASSERT_TRUE(back.is_ok());
  EXPECT_EQ(back->to_json(), ok->to_json());
  auto ps = api::parse_cluster_request(nlohmann::json::parse(R"({"n_workers": 2, "max_restarts": 3})"), 16);
  ASSERT_TRUE(ps.is_ok()) << ps.status().message();
  EXPECT_EQ(ps->max_restarts, 3);
}

}  // namespace
}  // namespace muster::service
