// The ClusterMode contract (service/cluster/mode.h), one typed suite that
// every cluster mode passes: PsMode, MpiMode, TorchrunMode and ElasticMode.
// The modes are driven as the ClusterManager drives them (plan, the tasks'
// workers, ready, wire, then the pass: endings, supervise, verdict), over a
// real WorkerRegistry on tests/fake_backend.h, a FakeClock and a fake
// launcher, so nothing forks or sleeps. Workers are played by the test.
//
// Only what mode.h promises of every mode is checked here. What a mode does
// with its promises (the ClusterSpec, the mpirun line, torchrun's
// environment, the world's generations) is in its own tests:
// cluster_manager_test, elastic_cluster_test, torchrun_line_test.
//
// A new mode joins by adding a Kind to ModeKinds. A Kind says how the mode
// is built, what a request of n workers is, whether it supervises its tasks
// (mode.h: its may_end() then lets every ending through) and what its job's
// success and a rank's failure look like in its tasks (mpi: mpirun's exit;
// elastic: once its world formed).
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include <gtest/gtest.h>

#include "api/base/worker_env.h"
#include "clusterspec/rendezvous_protocol.h"
#include "service/clock.h"
#include "service/cluster/elastic_mode.h"
#include "service/cluster/mode.h"
#include "service/cluster/mpi_mode.h"
#include "service/cluster/ps_mode.h"
#include "service/cluster/torchrun_mode.h"
#include "service/registry/registry.h"
#include "tests/fake_backend.h"
#include "tests/temp_dir.h"

namespace muster::service {
namespace {

namespace fs = std::filesystem;
using api::WorkerStatus;

struct FakeProcess final : LauncherProcess {
  std::optional<int> poll() override { return std::nullopt; }
  void terminate(std::chrono::milliseconds) override {}
};

struct FakeLauncher final : Launcher {
  std::vector<LauncherSpec> started;
  api::Result<std::unique_ptr<LauncherProcess>> start(const LauncherSpec& spec) override {
    started.push_back(spec);
    return std::unique_ptr<LauncherProcess>(std::make_unique<FakeProcess>());
  }
};

// What every mode is built over: a project with train.py, a state dir, the
// registry the modes borrow, the clock and the launcher.
struct Daemon {
  muster::testing::TempDir root{"muster-mode-contract"};
  fs::path project, state;
  FakeClock clock;
  muster::testing::FakeBackend backend;
  FakeLauncher launcher;
  std::unique_ptr<WorkerRegistry> registry;

  Daemon() {
    fs::create_directories(root.path() / "project");
    fs::create_directories(root.path() / "state");
    std::ofstream(root.path() / "project" / "train.py") << "print('hi')\n";
    project = fs::canonical(root.path() / "project");
    state = root.path() / "state";
    RegistryOptions o;
    o.state_dir = state;
    o.project_dir = project;
    o.agent_path = "/bin/true";
    o.daemon_port = 7000;
    o.async_backend = false;
    o.metrics_token = [](const std::string& id) { return "token-of-" + id; };
    registry = std::make_unique<WorkerRegistry>(o, backend, nullptr, clock);
  }
};

api::ClusterRequest base_request(api::ClusterKind mode, int n) {
  api::ClusterRequest r;
  r.mode = mode;
  r.n_workers = n;
  r.worker_script = "train.py";
  r.timeout_seconds = 30;
  return r;
}

void succeeded(api::Worker& w) {
  w.status = WorkerStatus::kSucceeded;
  w.exit_code = 0;
}

void failed(api::Worker& w) {
  w.status = WorkerStatus::kFailed;
  w.exit_code = 1;
}

// ---- the modes

struct Ps {
  static constexpr bool kSupervises = false;
  static std::unique_ptr<ClusterMode> make(Daemon& d) {
    return std::make_unique<PsMode>(PsModeOptions{d.project, d.root.path() / "no-such-muster-ps"});
  }
  static api::ClusterRequest request(int n) {
    auto r = base_request(api::ClusterKind::kPs, n);
    r.n_ps = 1;
    return r;
  }
  static void run(Daemon&, ClusterMode&, const api::Cluster&) {}
  // Without a chief, the job is done when every worker task succeeded; the
  // PS serve until stopped.
  static void succeed(Daemon&, const api::Cluster& c, std::vector<api::Worker>& w, std::optional<int>&) {
    for (size_t i = 0; i < c.tasks.size(); ++i) {
      if (c.tasks[i].type == "worker") succeeded(w[i]);
    }
  }
  static std::string fail(Daemon&, const api::Cluster&, std::vector<api::Worker>& w, std::optional<int>&) {
    failed(w.back());  // the last worker task
    return w.back().id;
  }
};

struct Mpi {
  static constexpr bool kSupervises = false;
  static std::unique_ptr<ClusterMode> make(Daemon& d) {
    return std::make_unique<MpiMode>(MpiModeOptions{d.state, d.project, "mpirun", {}}, *d.registry, d.launcher,
                                     nullptr);
  }
  static api::ClusterRequest request(int n) { return base_request(api::ClusterKind::kMpi, n); }
  static void run(Daemon&, ClusterMode&, const api::Cluster&) {}
  // The job is mpirun's: it exits 0, the hosts stay up until stopped.
  static void succeed(Daemon&, const api::Cluster&, std::vector<api::Worker>&, std::optional<int>& exit) { exit = 0; }
  // Rank 0 reports its exit (kRankExitWrapper) and mpirun exits 1.
  static std::string fail(Daemon& d, const api::Cluster& c, std::vector<api::Worker>& w, std::optional<int>& exit) {
    std::ofstream(d.state / "clusters" / c.id / "launcher.log")
        << "[1,0]<stderr>:Traceback (most recent call last):\n"
        << "[1,0]<stderr>:RuntimeError: boom\n"
        << "[1,0]<stderr>:muster: rank 0 exited with code 1\n";
    exit = 1;
    return w[0].id;
  }
};

struct Torchrun {
  static constexpr bool kSupervises = false;
  static std::unique_ptr<ClusterMode> make(Daemon& d) {
    return std::make_unique<TorchrunMode>(TorchrunModeOptions{d.project});
  }
  static api::ClusterRequest request(int n) { return base_request(api::ClusterKind::kTorchrun, n); }
  static void run(Daemon&, ClusterMode&, const api::Cluster&) {}
  static void succeed(Daemon&, const api::Cluster&, std::vector<api::Worker>& w, std::optional<int>&) {
    for (auto& x : w) succeeded(x);
  }
  static std::string fail(Daemon&, const api::Cluster&, std::vector<api::Worker>& w, std::optional<int>&) {
    failed(w[1]);
    return w[1].id;
  }
};

struct Elastic {
  static constexpr bool kSupervises = true;
  static std::unique_ptr<ClusterMode> make(Daemon& d) {
    return std::make_unique<ElasticMode>(ElasticModeOptions{d.project}, *d.registry, d.clock);
  }
  static api::ClusterRequest request(int n) {
    auto r = base_request(api::ClusterKind::kElastic, n);
    r.min_np = n;
    r.max_np = n;
    return r;
  }
  // The ranks join the world: generation 1 forms.
  static void run(Daemon&, ClusterMode& mode, const api::Cluster& c) {
    auto world = dynamic_cast<ElasticMode&>(mode).world(c.id);
    ASSERT_TRUE(world);
    for (const auto& t : c.tasks) world->join(t.worker_id, {0}, [](api::Result<clusterspec::rendezvous::Assignment>) {});
    ASSERT_EQ(world->generation(), 1);
  }
  static void succeed(Daemon&, const api::Cluster&, std::vector<api::Worker>& w, std::optional<int>&) {
    for (auto& x : w) succeeded(x);
  }
  // Every rank of the generation fails: nobody holds the training state.
  static std::string fail(Daemon&, const api::Cluster&, std::vector<api::Worker>& w, std::optional<int>&) {
    for (auto& x : w) failed(x);
    return w[0].id;
  }
};

// ---- the suite

// How one pass ends, as the manager reads the mode (lifecycle.cc, steps d),
// f), c)): a terminal task that may not end fails the cluster naming it;
// else a supervising mode's verdict; else verdict().
struct Outcome {
  std::optional<api::ClusterStatus> status;
  std::string reason;
};

template <class Kind>
class ClusterModeContract : public ::testing::Test {
 protected:
  void SetUp() override { mode_ = Kind::make(d_); }

  // plan(), then the tasks the manager makes of the batches: fresh workers
  // (starting, no address) for launched batches, in task order.
  api::Cluster planned(int n, std::vector<TaskBatch>* batches_out = nullptr) {
    api::Cluster c;
    c.id = "c-" + std::to_string(next_++);
    c.request = Kind::request(n);
    auto plan = mode_->plan(c.id, c.request);
    EXPECT_TRUE(plan.is_ok()) << plan.status().message();
    if (!plan.is_ok()) return c;
    c.script_path = plan->script_path;
    fs::create_directories(d_.state / "clusters" / c.id);
    int worker = 0;
    for (const auto& b : plan->batches) {
      for (int i = 0; i < b.batch.request.n; ++i) {
        const std::string id = c.id + "-w" + std::to_string(worker++);
        c.tasks.push_back({b.type, i, id});
        held_[id] = b.batch.per_worker.empty() ? false : b.batch.per_worker[static_cast<size_t>(i)].hold;
        reserves_[id] = b.batch.per_worker.empty() ? false : b.batch.per_worker[static_cast<size_t>(i)].reserve_port;
      }
    }
    if (batches_out) *batches_out = plan->batches;
    return c;
  }

  // Every task's worker as its agent registered it: running, with an IP and
  // (where its task reserved one) a port.
  std::vector<api::Worker> registered(const api::Cluster& c) {
    std::vector<api::Worker> out;
    int port = 41000;
    for (const auto& t : c.tasks) {
      api::Worker w;
      w.id = t.worker_id;
      w.cluster_id = c.id;
      w.status = WorkerStatus::kRunning;
      w.ip_address = "127.0.0.1";
      if (reserves_[t.worker_id]) w.port = port++;
      out.push_back(w);
    }
    return out;
  }

  // planned() of n, registered, wired and running.
  api::Cluster running(int n, std::vector<api::Worker>& workers) {
    api::Cluster c = planned(n);
    workers = registered(c);
    auto wired = mode_->wire(c, workers);
    EXPECT_TRUE(wired.is_ok()) << wired.status().message();
    c.status = api::ClusterStatus::kRunning;
    Kind::run(d_, *mode_, c);
    return c;
  }

  Outcome pass(api::Cluster& c, const std::vector<api::Worker>& workers, std::optional<int> launcher_exit) {
    for (size_t i = 0; i < c.tasks.size(); ++i) {
      if (api::is_terminal(workers[i].status) && !mode_->may_end(c.tasks[i], workers[i])) {
        return {api::ClusterStatus::kFailed, c.task_name(c.tasks[i]) + " ended " +
                                                 api::worker_status_name(workers[i].status)};
      }
    }
    Supervision sup = mode_->supervise(c, workers);
    if (sup.verdict) return {sup.verdict->status, sup.verdict->reason};
    if (auto v = mode_->verdict(c, workers, launcher_exit)) return {v->status, v->reason};
    return {};
  }

  Daemon d_;
  std::unique_ptr<ClusterMode> mode_;
  std::map<std::string, bool> held_, reserves_;
  int next_ = 1;
};

using ModeKinds = ::testing::Types<Ps, Mpi, Torchrun, Elastic>;
struct ModeNames {
  template <class T>
  static std::string GetName(int) {
    if (std::is_same_v<T, Ps>) return "Ps";
    if (std::is_same_v<T, Mpi>) return "Mpi";
    if (std::is_same_v<T, Torchrun>) return "Torchrun";
    return "Elastic";
  }
};
TYPED_TEST_SUITE(ClusterModeContract, ModeKinds, ModeNames);

// plan(): launch batches in task order, each of one task type, one task per
// worker it launches; each launched task carries its cluster (the batch's
// cluster_id and MUSTER_CLUSTER_ID in its environment, tasks.h's
// task_batch()); the script is resolved once, inside the project directory
// (Plan::script_path, which wire() runs).
TYPED_TEST(ClusterModeContract, PlanGivesOneTaskPerWorkerEachCarryingItsCluster) {
  std::vector<TaskBatch> batches;
  const api::Cluster c = this->planned(3, &batches);
  ASSERT_FALSE(batches.empty());
  size_t tasks = 0;
  for (const auto& b : batches) {
    EXPECT_FALSE(b.type.empty());
    ASSERT_TRUE(b.existing.empty());
    EXPECT_EQ(b.batch.cluster_id, c.id);
    ASSERT_GT(b.batch.request.n, 0);
    ASSERT_EQ(b.batch.per_worker.size(), static_cast<size_t>(b.batch.request.n)) << b.type;
    for (const auto& extras : b.batch.per_worker) {
      auto env = extras.env.find(base::kEnvClusterId);
      ASSERT_NE(env, extras.env.end()) << b.type << " task without " << base::kEnvClusterId;
      EXPECT_EQ(env->second, c.id);
    }
    if (!b.batch.request.script_path.empty()) {
      EXPECT_EQ(b.batch.request.script_path, this->d_.project / "train.py") << b.type;
    }
    tasks += static_cast<size_t>(b.batch.request.n);
  }
  EXPECT_EQ(c.tasks.size(), tasks);
  EXPECT_EQ(c.script_path, this->d_.project / "train.py");
  EXPECT_GE(std::count_if(c.tasks.begin(), c.tasks.end(), [](const api::ClusterTask& t) { return t.type == "worker"; }),
            3);
}

// plan(): a bad script launches nothing, and the error names the field.
TYPED_TEST(ClusterModeContract, PlanOfABadScriptFailsNamingTheField) {
  for (const char* script : {"missing.py", "../outside.py", "/etc/passwd"}) {
    auto r = TypeParam::request(2);
    r.worker_script = script;
    auto plan = this->mode_->plan("c-bad", r);
    ASSERT_FALSE(plan.is_ok()) << script;
    EXPECT_EQ(plan.status().code(), api::ErrorCode::kInvalidArgument) << script;
    EXPECT_EQ(plan.status().field(), "worker_script") << script << ": " << plan.status().message();
  }
}

// plan() is called from HTTP threads, several at once.
TYPED_TEST(ClusterModeContract, PlanMayRunOnSeveralThreadsAtOnce) {
  std::vector<std::thread> threads;
  std::vector<int> ok(8, 0);
  for (int i = 0; i < 8; ++i) {
    threads.emplace_back([&, i] {
      auto p = this->mode_->plan("c-t" + std::to_string(i), TypeParam::request(2));
      ok[static_cast<size_t>(i)] = p.is_ok() && p->batches.front().batch.cluster_id == "c-t" + std::to_string(i);
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(std::count(ok.begin(), ok.end(), 1), 8);
}

// ready(w): never before api::is_reachable(w) (running, address
// registered); a reachable worker with the port its task reserved is ready.
TYPED_TEST(ClusterModeContract, ReadyOnlyOnceReachable) {
  const api::Cluster c = this->planned(2);
  for (const auto& w : this->registered(c)) EXPECT_TRUE(this->mode_->ready(w)) << w.id;
  for (auto status : {WorkerStatus::kScheduling, WorkerStatus::kStarting, WorkerStatus::kRunning,
                      WorkerStatus::kSucceeded, WorkerStatus::kFailed, WorkerStatus::kTimedOut, WorkerStatus::kStopped,
                      WorkerStatus::kLost}) {
    for (const char* ip : {static_cast<const char*>(api::kUnknownAddress), "10.0.0.2"}) {
      for (std::optional<int> port : {std::optional<int>(), std::optional<int>(40000)}) {
        api::Worker w;
        w.id = c.tasks.front().worker_id;
        w.status = status;
        w.ip_address = ip;
        w.port = port;
        if (!api::is_reachable(w)) {
          EXPECT_FALSE(this->mode_->ready(w)) << api::worker_status_name(status) << " " << ip;
        }
      }
    }
  }
}

// may_end(): a task that failed, was lost, stopped or timed out ends the
// cluster, unless the mode supervises its tasks (then every ending is let
// through to supervise()).
TYPED_TEST(ClusterModeContract, ABadEndingEndsTheClusterUnlessTheModeSupervises) {
  std::vector<api::Worker> workers;
  const api::Cluster c = this->running(2, workers);
  for (auto status : {WorkerStatus::kFailed, WorkerStatus::kLost, WorkerStatus::kStopped, WorkerStatus::kTimedOut}) {
    for (size_t i = 0; i < c.tasks.size(); ++i) {
      api::Worker w = workers[i];
      w.status = status;
      w.exit_code = status == WorkerStatus::kFailed ? std::optional<int>(1) : std::nullopt;
      EXPECT_EQ(this->mode_->may_end(c.tasks[i], w), TypeParam::kSupervises)
          << c.task_name(c.tasks[i]) << " " << api::worker_status_name(status);
    }
  }
}

// wire(): once every task is ready; it releases exactly the tasks that
// were launched held (each once, and nobody else), and says what it did.
TYPED_TEST(ClusterModeContract, WireReleasesEveryHeldTaskOnce) {
  const api::Cluster c = this->planned(3);
  const auto workers = this->registered(c);
  for (const auto& w : workers) ASSERT_TRUE(this->mode_->ready(w));
  auto wired = this->mode_->wire(c, workers);
  ASSERT_TRUE(wired.is_ok()) << wired.status().message();
  std::multiset<std::string> released;
  for (const auto& [id, release] : wired->releases) released.insert(id);
  std::multiset<std::string> held;
  for (const auto& t : c.tasks) {
    if (this->held_[t.worker_id]) held.insert(t.worker_id);
  }
  EXPECT_EQ(released, held);
  EXPECT_FALSE(wired->summary.empty());
}

// verdict() (or a supervising pass) while every task runs: not yet.
TYPED_TEST(ClusterModeContract, WhileEveryTaskRunsTheClusterHasNotEnded) {
  std::vector<api::Worker> workers;
  api::Cluster c = this->running(2, workers);
  for (int pass = 0; pass < 3; ++pass) {
    const Outcome o = this->pass(c, workers, std::nullopt);
    EXPECT_FALSE(o.status) << "pass " << pass << ": " << o.reason;
  }
}

// The job succeeded (every rank's program exited 0; mpi: mpirun with
// them): the cluster succeeded, and no task's ending counts against it.
TYPED_TEST(ClusterModeContract, AJobThatSucceededEndsTheClusterSucceeded) {
  std::vector<api::Worker> workers;
  api::Cluster c = this->running(2, workers);
  std::optional<int> launcher_exit;
  TypeParam::succeed(this->d_, c, workers, launcher_exit);
  const Outcome o = this->pass(c, workers, launcher_exit);
  ASSERT_TRUE(o.status) << "no verdict";
  EXPECT_EQ(*o.status, api::ClusterStatus::kSucceeded) << o.reason;
}

// A rank failed and nothing recovers it: the cluster failed, naming the
// worker of the rank that failed.
TYPED_TEST(ClusterModeContract, AFailedRankFailsTheClusterNamingIt) {
  std::vector<api::Worker> workers;
  api::Cluster c = this->running(2, workers);
  std::optional<int> launcher_exit;
  const std::string who = TypeParam::fail(this->d_, c, workers, launcher_exit);
  const Outcome o = this->pass(c, workers, launcher_exit);
  ASSERT_TRUE(o.status) << "no verdict";
  EXPECT_EQ(*o.status, api::ClusterStatus::kFailed);
  EXPECT_NE(o.reason.find(who), std::string::npos) << "does not name worker " << who << ": " << o.reason;
}

// log(): a file, or the worker of one of the cluster's tasks.
TYPED_TEST(ClusterModeContract, TheLogIsAFileOrATasksWorker) {
  std::vector<api::Worker> workers;
  const api::Cluster c = this->running(2, workers);
  const LogSource source = this->mode_->log(c);
  if (source.file.empty()) {
    EXPECT_TRUE(std::any_of(c.tasks.begin(), c.tasks.end(),
                            [&](const api::ClusterTask& t) { return t.worker_id == source.worker_id; }))
        << "'" << source.worker_id << "' is no task's worker";
  } else {
    EXPECT_TRUE(source.worker_id.empty());
  }
}

// endings(): only the cluster's own tasks, each with a terminal status.
TYPED_TEST(ClusterModeContract, EndingsNameOnlyTasksAndTerminalStatuses) {
  std::vector<api::Worker> workers;
  const api::Cluster c = this->running(2, workers);
  for (auto status : {api::ClusterStatus::kSucceeded, api::ClusterStatus::kFailed, api::ClusterStatus::kStopped}) {
    for (const auto& [id, ending] : this->mode_->endings(c, status, workers)) {
      EXPECT_TRUE(std::any_of(c.tasks.begin(), c.tasks.end(), [&](const api::ClusterTask& t) { return t.worker_id == id; }))
          << id;
      EXPECT_TRUE(api::is_terminal(ending.status)) << id << ": " << api::worker_status_name(ending.status);
    }
  }
}

// resume(): a cluster still starting is never taken back (what wire()
// would have used is gone with the earlier daemon).
TYPED_TEST(ClusterModeContract, AClusterStillStartingIsNotResumed) {
  api::Cluster c = this->planned(2);
  c.status = api::ClusterStatus::kStarting;
  EXPECT_FALSE(this->mode_->resume(c));
}

}  // namespace
}  // namespace muster::service
