// ClusterManager driven step by step: a real WorkerRegistry over a fake
// backend, a FakeClock and a fake launcher, so nothing forks or sleeps.
// Agents are played by calling the registry's agent_* methods.
#include "service/cluster/manager.h"
#include "service/cluster/mpi_mode.h"

#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <thread>

#include <algorithm>
#include <filesystem>
#include <optional>
#include <fstream>
#include <regex>
#include <set>

#include <gtest/gtest.h>

#include "clusterspec/shell.h"
#include "clusterspec/tf_config.h"
#include "service/cluster/routes.h"
#include "service/cluster/mpi_output.h"

namespace muster::service {
namespace {

namespace fs = std::filesystem;
using api::WorkerStatus;

class FakeBackend final : public workers::Backend {
 public:
  std::string name() const override { return "fake"; }
  std::string master_address() const override { return "127.0.0.1"; }
  api::Status launch(const std::vector<workers::LaunchSpec>& specs) override {
    std::lock_guard<std::mutex> lock(mu);
    for (const auto& s : specs) launched.push_back(s);
    return api::Status::ok();
  }
  api::Status stop(const std::string& id, std::chrono::milliseconds) override {
    std::lock_guard<std::mutex> lock(mu);
    stopped.insert(id);
    return api::Status::ok();
  }
  workers::ProcessStatus poll(const std::string&) override { return {workers::ProcessState::kRunning, {}}; }
  void shutdown() override {}

  std::mutex mu;
  std::vector<workers::LaunchSpec> launched;
  std::set<std::string> stopped;
};

struct FakeProcess final : LauncherProcess {
  std::optional<int>* exit_code;
  bool* terminated;
  std::optional<int> poll() override { return *exit_code; }
  void terminate(std::chrono::milliseconds) override {
    *terminated = true;
    if (!*exit_code) *exit_code = 143;
  }
};

struct FakeLauncher final : Launcher {
  std::vector<LauncherSpec> started;
  std::optional<int> exit_code;
  bool terminated = false;
  api::Result<std::unique_ptr<LauncherProcess>> start(const LauncherSpec& spec) override {
    started.push_back(spec);
    auto p = std::make_unique<FakeProcess>();
    p->exit_code = &exit_code;
    p->terminated = &terminated;
    return std::unique_ptr<LauncherProcess>(std::move(p));
  }
};

// A launched mpirun line less what only musterd's launch adds (the cluster
// id forwarded to every rank, the exit report in front of each rank's
// command, kRankExitWrapper): what the cluster shows. Fails the test when
// either is not there.
std::vector<std::string> without_launch_additions(std::vector<std::string> argv) {
  for (const std::vector<std::string>& added :
       {std::vector<std::string>{"-x", "MUSTER_CLUSTER_ID"},
        std::vector<std::string>{"/bin/sh", "-c", kRankExitWrapper, "muster-rank"}}) {
    auto at = std::search(argv.begin(), argv.end(), added.begin(), added.end());
    EXPECT_NE(at, argv.end()) << added.front() << " " << added[1] << " not in " << clusterspec::join_for_shell(argv);
    if (at != argv.end()) argv.erase(at, at + static_cast<std::ptrdiff_t>(added.size()));
  }
  return argv;
}

// The cluster side's view of the backend's hosts: records what it was asked
// and answers what the test sets.
struct FakeMpiHosts final : workers::MpiHosts {
  std::vector<workers::MpiHostsRequest> asked;
  api::Result<workers::MpiLaunchSettings> answer = workers::MpiLaunchSettings{};
  api::Result<workers::MpiLaunchSettings> preflight_mpi(const workers::MpiHostsRequest& request) override {
    asked.push_back(request);
    return answer;
  }
};

class ClusterManagerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() / ("muster_cm_" + std::to_string(::getpid()) + "_" +
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
    ro.daemon_port = 1;
    ro.async_backend = false;
    registry_ = std::make_unique<WorkerRegistry>(ro, backend_, nullptr, clock_);
    auto store = ClusterStore::open(":memory:");
    ASSERT_TRUE(store.is_ok());
    store_ = std::move(store).value();
    make_manager();
  }

  void TearDown() override {
    manager_.reset();
    registry_.reset();
    fs::remove_all(root_);
  }

  void make_manager(workers::MpiHosts* mpi_hosts = nullptr) {
    manager_.reset();
    auto launcher = std::make_unique<FakeLauncher>();
    launcher_ = launcher.get();
    ClusterManagerOptions o;
    o.state_dir = root_ / "state";
    o.validation = {16, project_};
    o.ps_program = root_ / "no-such-muster-ps";
    o.start_thread = false;
    manager_ = std::make_unique<ClusterManager>(o, *registry_, store_.get(), clock_, std::move(launcher), mpi_hosts);
  }

  api::Cluster create(api::ClusterRequest r) {
    auto c = manager_->create(r);
    EXPECT_TRUE(c.is_ok()) << c.status().message();
    return c.is_ok() ? c.value() : api::Cluster{};
  }

  api::Cluster now(const std::string& id) {
    manager_->step();
    return manager_->get(id).value();
  }

  api::Worker worker(const std::string& id) { return registry_->get(id).value(); }

  // Registers every task as its agent would, each with its own port.
  void register_all(const api::Cluster& c, bool with_port) {
    int port = 40000;
    for (const auto& t : c.tasks) {
      auto held = registry_->agent_register(t.worker_id, "127.0.0.1", with_port ? std::optional<int>(port++) : std::nullopt);
      ASSERT_TRUE(held.is_ok()) << held.status().message();
    }
  }

  std::optional<Release> release_of(const std::string& worker_id) {
    std::optional<Release> got;
    auto s = registry_->agent_wait_release(worker_id, [&](std::optional<Release> r) { got = std::move(r); });
    EXPECT_TRUE(s.is_ok()) << s.message();
    return got;
  }

  static api::ClusterRequest ps_request(int n_ps, int n_workers) {
    api::ClusterRequest r;
    r.mode = api::ClusterKind::kPs;
    r.n_ps = n_ps;
    r.n_workers = n_workers;
    r.worker_script = "train.py";
    r.timeout_seconds = 30;
    return r;
  }

  static api::ClusterRequest mpi_request(int n_workers, int slots) {
    api::ClusterRequest r;
    r.mode = api::ClusterKind::kMpi;
    r.n_workers = n_workers;
    r.slots = slots;
    r.worker_script = "train.py";
    r.args = {"--epochs", "1"};
    r.env = {{"MY_VAR", "x"}};
    return r;
  }

  fs::path root_, project_;
  FakeClock clock_;
  FakeBackend backend_;
  std::unique_ptr<WorkerRegistry> registry_;
  std::unique_ptr<ClusterStore> store_;
  std::unique_ptr<ClusterManager> manager_;
  FakeLauncher* launcher_ = nullptr;
};

TEST_F(ClusterManagerTest, PsWiringReleasesEveryTaskWithItsOwnTfConfig) {
  auto c = create(ps_request(1, 2));
  ASSERT_EQ(c.tasks.size(), 3u);
  EXPECT_EQ(c.status, api::ClusterStatus::kStarting);
  EXPECT_EQ(c.workers_json().dump(),
            nlohmann::json({{"ps", {c.tasks[0].worker_id}}, {"worker", {c.tasks[1].worker_id, c.tasks[2].worker_id}}})
                .dump());
  // Every task was launched held, reserving a port, tagged with the cluster.
  ASSERT_EQ(backend_.launched.size(), 3u);
  for (const auto& spec : backend_.launched) {
    EXPECT_EQ(spec.env.at("MUSTER_RESERVE_PORT"), "1");
    EXPECT_EQ(spec.env.at("MUSTER_CLUSTER_ID"), c.id);
  }
  EXPECT_EQ(worker(c.tasks[1].worker_id).cluster_id.value_or(""), c.id);
  EXPECT_EQ(now(c.id).status, api::ClusterStatus::kStarting);

  register_all(c, true);
  auto running = now(c.id);
  ASSERT_EQ(running.status, api::ClusterStatus::kRunning) << running.reason;
  EXPECT_EQ(running.cluster_spec.dump(), R"({"ps":["127.0.0.1:40000"],"worker":["127.0.0.1:40001","127.0.0.1:40002"]})");

  std::set<std::string> seen, secrets;
  for (const auto& t : c.tasks) {
    auto release = release_of(t.worker_id);
    ASSERT_TRUE(release.has_value()) << t.worker_id;
    // One secret per cluster for its muster-ps tasks, the same for every task, never in the record.
    const std::string secret = release->env.at("MUSTER_PS_SECRET");
    EXPECT_EQ(secret.size(), 64u);
    EXPECT_EQ(secret.find_first_not_of("0123456789abcdef"), std::string::npos) << secret;
    EXPECT_EQ(now(c.id).to_json().dump().find(secret), std::string::npos);
    secrets.insert(secret);
    auto config = clusterspec::TfConfig::parse(release->env.at("TF_CONFIG"));
    EXPECT_EQ(config.task_type, t.type);
    EXPECT_EQ(config.task_index, t.index);
    EXPECT_EQ(config.cluster.to_json(), running.cluster_spec);
    EXPECT_EQ(clusterspec::TfConfig::parse(release->files.at("cluster.json")).dump(), config.dump());
    seen.insert(t.type + std::to_string(t.index));
  }
  EXPECT_EQ(seen, (std::set<std::string>{"ps0", "worker0", "worker1"}));
  EXPECT_EQ(secrets.size(), 1u);

  // Workers end well -> the PS is stopped and the cluster succeeded.
  ASSERT_TRUE(registry_->agent_exit(c.tasks[1].worker_id, 0).is_ok());
  EXPECT_EQ(now(c.id).status, api::ClusterStatus::kRunning);
  ASSERT_TRUE(registry_->agent_exit(c.tasks[2].worker_id, 0).is_ok());
  auto done = now(c.id);
  EXPECT_EQ(done.status, api::ClusterStatus::kSucceeded) << done.reason;
  EXPECT_EQ(worker(c.tasks[0].worker_id).status, WorkerStatus::kStopped);
  EXPECT_TRUE(done.finished_at.has_value());
}

TEST_F(ClusterManagerTest, CrashingWorkerFailsTheClusterAndStopsTheRest) {
  auto c = create(ps_request(1, 2));
  register_all(c, true);
  ASSERT_EQ(now(c.id).status, api::ClusterStatus::kRunning);
  ASSERT_TRUE(registry_->agent_exit(c.tasks[2].worker_id, 3).is_ok());
  auto failed = now(c.id);
  EXPECT_EQ(failed.status, api::ClusterStatus::kFailed);
  EXPECT_EQ(failed.reason, "worker 1 (id " + c.tasks[2].worker_id + ") failed with exit code 3");
  EXPECT_EQ(worker(c.tasks[0].worker_id).status, WorkerStatus::kStopped);
  EXPECT_EQ(worker(c.tasks[1].worker_id).status, WorkerStatus::kStopped);
  // Terminal: later events change nothing.
  EXPECT_EQ(now(c.id).reason, failed.reason);
}

TEST_F(ClusterManagerTest, TaskDyingBeforeWiringFailsTheCluster) {
  auto c = create(ps_request(2, 1));
  ASSERT_TRUE(registry_->agent_register(c.tasks[0].worker_id, "127.0.0.1", 5000).is_ok());
  ASSERT_TRUE(registry_->agent_exit(c.tasks[1].worker_id, 1).is_ok());
  auto failed = now(c.id);
  EXPECT_EQ(failed.status, api::ClusterStatus::kFailed);
  EXPECT_EQ(failed.reason, "ps 1 (id " + c.tasks[1].worker_id + ") failed with exit code 1");
  EXPECT_TRUE(failed.cluster_spec.is_null());
  EXPECT_EQ(worker(c.tasks[0].worker_id).status, WorkerStatus::kStopped);
}

TEST_F(ClusterManagerTest, RegistrationTimeoutNamesTheMissingTask) {
  auto c = create(ps_request(1, 2));
  ASSERT_TRUE(registry_->agent_register(c.tasks[0].worker_id, "127.0.0.1", 5000).is_ok());
  ASSERT_TRUE(registry_->agent_register(c.tasks[1].worker_id, "127.0.0.1", 5001).is_ok());
  clock_.advance(std::chrono::seconds(29));
  EXPECT_EQ(now(c.id).status, api::ClusterStatus::kStarting);
  clock_.advance(std::chrono::seconds(2));
  auto failed = now(c.id);
  EXPECT_EQ(failed.status, api::ClusterStatus::kFailed);
  EXPECT_EQ(failed.reason,
            "worker 1 (id " + c.tasks[2].worker_id + ") did not register within 30 s (timeout_seconds)");
  for (const auto& t : c.tasks) EXPECT_TRUE(api::is_terminal(worker(t.worker_id).status));
}

TEST_F(ClusterManagerTest, PsTasksWithoutScriptWaitToBeStopped) {
  auto r = ps_request(1, 1);
  r.worker_script = "";
  auto c = create(r);
  for (const auto& spec : backend_.launched) {
    auto code = std::find(spec.agent_argv.begin(), spec.agent_argv.end(), "--code");
    ASSERT_NE(code, spec.agent_argv.end());
    EXPECT_NE((code + 1)->find("time.sleep"), std::string::npos);
  }
  register_all(c, true);
  EXPECT_EQ(now(c.id).status, api::ClusterStatus::kRunning);
  auto stopped = manager_->stop(c.id);
  ASSERT_TRUE(stopped.is_ok());
  EXPECT_EQ(stopped->status, api::ClusterStatus::kStopped);
  EXPECT_EQ(stopped->reason, "stopped by request");
  for (const auto& t : c.tasks) EXPECT_EQ(worker(t.worker_id).status, WorkerStatus::kStopped);
  // Stopping again returns the cluster unchanged.
  EXPECT_EQ(manager_->stop(c.id)->status, api::ClusterStatus::kStopped);
}

TEST_F(ClusterManagerTest, PsProgramIsUsedWhenItExists) {
  const fs::path ps = root_ / "muster-ps";
  std::ofstream(ps) << "#!/bin/sh\n";
  fs::permissions(ps, fs::perms::owner_all);
  manager_.reset();
  auto launcher = std::make_unique<FakeLauncher>();
  ClusterManagerOptions o;
  o.state_dir = root_ / "state";
  o.validation = {16, project_};
  o.ps_program = ps;
  o.start_thread = false;
  manager_ = std::make_unique<ClusterManager>(o, *registry_, store_.get(), clock_, std::move(launcher));
  create(ps_request(1, 1));
  ASSERT_EQ(backend_.launched.size(), 2u);
  const auto& argv = backend_.launched[0].agent_argv;
  auto script = std::find(argv.begin(), argv.end(), "--script");
  ASSERT_NE(script, argv.end());
  EXPECT_EQ(*(script + 1), ps.string());
  EXPECT_NE(std::find(argv.begin(), argv.end(), "executable"), argv.end());
}

TEST_F(ClusterManagerTest, BadScriptLaunchesNothing) {
  auto r = ps_request(1, 2);
  r.worker_script = "../etc/passwd";
  auto c = manager_->create(r);
  ASSERT_FALSE(c.is_ok());
  EXPECT_EQ(c.status().field(), "worker_script");
  r = ps_request(1, 2);
  r.ps_script = "missing.py";
  c = manager_->create(r);
  ASSERT_FALSE(c.is_ok());
  EXPECT_EQ(c.status().field(), "ps_script");
  EXPECT_TRUE(backend_.launched.empty());
  EXPECT_TRUE(manager_->list().empty());
}

TEST_F(ClusterManagerTest, MpiBuildsLinesAndRunsTheLauncher) {
  auto c = create(mpi_request(2, 2));
  ASSERT_EQ(c.tasks.size(), 2u);
  EXPECT_EQ(backend_.launched[0].env.count("MUSTER_RESERVE_PORT"), 0u);
  register_all(c, false);
  auto running = now(c.id);
  ASSERT_EQ(running.status, api::ClusterStatus::kRunning) << running.reason;
  // The local backend: one host, all slots on it.
  EXPECT_EQ(running.hostfile, "127.0.0.1 slots=4\n");
  const std::string script = (project_ / "train.py").string();
  EXPECT_EQ(running.horovodrun_argv,
            (std::vector<std::string>{"horovodrun", "-np", "4", "-H", "127.0.0.1:4", "-p", "2222", "/usr/bin/python3", "-u",
                                      script, "--epochs", "1"}));
  ASSERT_EQ(launcher_->started.size(), 1u);
  const auto& argv = launcher_->started[0].argv;
  // The line shown is the one launched less musterd's own additions: one a
  // user can run (no wrapper script in it).
  EXPECT_EQ(without_launch_additions(argv), running.mpirun_argv);
  const std::string shown = running.to_json()["mpirun_command"];
  EXPECT_EQ(shown.find("/bin/sh"), std::string::npos) << shown;
  EXPECT_EQ(shown.find("muster-rank"), std::string::npos) << shown;
  EXPECT_EQ(shown, "mpirun --allow-run-as-root --tag-output -np 4 -H 127.0.0.1:4 -bind-to none -map-by slot "
                   "-mca pml ob1 -mca btl '^openib' -mca plm_rsh_args '-p 2222' -x MY_VAR "
                   "/usr/bin/python3 -u " + script + " --epochs 1");
  EXPECT_EQ(argv[0], "mpirun");
  EXPECT_NE(std::find(argv.begin(), argv.end(), "MY_VAR"), argv.end());
  EXPECT_EQ(launcher_->started[0].env.at("MY_VAR"), "x");
  std::ifstream hostfile(root_ / "state" / "clusters" / c.id / "hostfile");
  std::string line;
  std::getline(hostfile, line);
  EXPECT_EQ(line, "127.0.0.1 slots=4");

  EXPECT_EQ(now(c.id).status, api::ClusterStatus::kRunning);
  launcher_->exit_code = 0;
  auto done = now(c.id);
  EXPECT_EQ(done.status, api::ClusterStatus::kSucceeded) << done.reason;
  EXPECT_EQ(done.launcher_exit_code.value_or(-1), 0);
  for (const auto& t : c.tasks) {
    // The hosts end as their ranks did, as torchrun's and ps's workers do.
    EXPECT_EQ(worker(t.worker_id).status, WorkerStatus::kSucceeded);
    EXPECT_EQ(worker(t.worker_id).exit_code.value_or(-1), 0);
    EXPECT_EQ(worker(t.worker_id).reason, "cluster " + c.id + " succeeded");  // not "stopped through the API"
  }
}

// A failed job names the first rank that failed as mpirun reported it, on
// its host and worker (ranks map by slot over the hosts, in order), with the
// rank's last lines.
TEST_F(ClusterManagerTest, MpiFailureNamesTheFirstFailedRankWithItsLastLines) {
  auto c = create(mpi_request(2, 1));
  register_all(c, false);
  ASSERT_EQ(now(c.id).status, api::ClusterStatus::kRunning);
  std::ofstream(root_ / "state" / "clusters" / c.id / "launcher.log")
      << "[1,0]<stdout>:epoch 1\n[1,1]<stdout>:loading\n[1,1]<stderr>:Traceback (most recent call last):\n"
         "[1,1]<stderr>:ValueError: bad batch\n[1,0]<stdout>:epoch 2\n"
         "--------------------------------------------------------------------------\n"
         "mpirun detected that one or more processes exited with non-zero status, thus causing\n"
         "the job to be terminated. The first process to do so was:\n\n"
         "  Process name: [[7052,1],1]\n  Exit code:    3\n";
  launcher_->exit_code = 1;
  auto failed = now(c.id);
  EXPECT_EQ(failed.status, api::ClusterStatus::kFailed);
  ASSERT_TRUE(failed.failed_rank);
  EXPECT_EQ(failed.failed_rank->rank, 1);
  EXPECT_EQ(failed.failed_rank->host, "127.0.0.1");
  EXPECT_EQ(failed.failed_rank->worker_id, c.tasks[1].worker_id);
  EXPECT_EQ(failed.failed_rank->exit_code, 3);
  EXPECT_EQ(failed.failed_rank->log_tail,
            (std::vector<std::string>{"loading", "Traceback (most recent call last):", "ValueError: bad batch"}));
  EXPECT_EQ(failed.reason.rfind("rank 1 on 127.0.0.1 (worker " + c.tasks[1].worker_id + ") exited with code 3", 0), 0u)
      << failed.reason;
  EXPECT_EQ(failed.to_json()["failed_rank"]["log_tail"].size(), 3u);
  for (const auto& t : c.tasks) EXPECT_EQ(worker(t.worker_id).reason.rfind("cluster " + c.id + " failed: rank 1", 0), 0u);
  // The record keeps it across a restart.
  auto stored = api::Cluster::from_record(failed.to_record());
  ASSERT_TRUE(stored.is_ok());
  ASSERT_TRUE(stored->failed_rank);
  EXPECT_EQ(stored->failed_rank->log_tail, failed.failed_rank->log_tail);
}

// The rank that raised is named, not the one mpirun saw exit first, which
// failed of it (its EngineStopped names rank 1); each host ends as its ranks
// did, with their exit codes.
TEST_F(ClusterManagerTest, MpiFailureNamesTheRankThatRaisedNotItsVictim) {
  auto c = create(mpi_request(2, 1));
  register_all(c, false);
  ASSERT_EQ(now(c.id).status, api::ClusterStatus::kRunning);
  std::ofstream(root_ / "state" / "clusters" / c.id / "launcher.log")
      << "[1,0]<stdout>:step 3\n[1,1]<stderr>:Traceback (most recent call last):\n"
         "[1,1]<stderr>:  File \"train.py\", line 9, in <module>\n"
         "[1,0]<stderr>:Traceback (most recent call last):\n"
         "[1,0]<stderr>:muster.torch.engine.EngineStopped: muster.torch was shut down on rank 1; collectives ...\n"
         "[1,0]<stderr>:muster: rank 0 exited with code 1\n"
         "[1,1]<stderr>:KeyError: 'config'\n"
         "[1,1]<stderr>:muster-failure {\"rank\": 1, \"exception\": \"KeyError: 'config'\", \"blames\": null}\n"
         "[1,1]<stderr>:muster: rank 1 exited with code 1\n"
         "mpirun detected that one or more processes exited with non-zero status, thus causing\n"
         "the job to be terminated. The first process to do so was:\n\n"
         "  Process name: [[7052,1],0]\n  Exit code:    1\n";
  launcher_->exit_code = 1;
  auto failed = now(c.id);
  EXPECT_EQ(failed.status, api::ClusterStatus::kFailed);
  ASSERT_TRUE(failed.failed_rank);
  EXPECT_EQ(failed.failed_rank->rank, 1);
  EXPECT_EQ(failed.failed_rank->worker_id, c.tasks[1].worker_id);
  EXPECT_EQ(failed.failed_rank->exception, "KeyError: 'config'");
  EXPECT_EQ(failed.failed_rank->then_failed.rfind("rank 0 (muster.torch.engine.EngineStopped", 0), 0u)
      << failed.failed_rank->then_failed;
  EXPECT_EQ(failed.reason.rfind("rank 1 on 127.0.0.1 (worker " + c.tasks[1].worker_id +
                                    ") exited with code 1: KeyError: 'config'; then failed: rank 0",
                                0),
            0u)
      << failed.reason;
  for (const auto& t : c.tasks) {
    EXPECT_EQ(worker(t.worker_id).status, WorkerStatus::kFailed);
    EXPECT_EQ(worker(t.worker_id).exit_code.value_or(-1), 1);
  }
}

// kRankExitWrapper run for real by /bin/sh as rank 1, in a process group
// of its own as mpirun starts ranks: how it ended (a waitpid status), what
// it wrote to stdout and to stderr. With `term_after`, the group gets
// SIGTERM then (mpirun forwarding a signal to its job).
struct Wrapped {
  int status = 0;
  std::string out, err;
};
Wrapped run_rank_wrapper(const std::string& command, std::optional<std::chrono::milliseconds> term_after = {}) {
  int out[2], err[2];
  EXPECT_EQ(::pipe(out), 0);
  EXPECT_EQ(::pipe(err), 0);
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::setpgid(0, 0);
    ::dup2(out[1], 1);
    ::dup2(err[1], 2);
    ::setenv("OMPI_COMM_WORLD_RANK", "1", 1);
    ::execl("/bin/sh", "sh", "-c", kRankExitWrapper, "muster-rank", "/bin/sh", "-c", command.c_str(), nullptr);
    ::_exit(127);
  }
  ::close(out[1]);
  ::close(err[1]);
  if (term_after) {
    std::this_thread::sleep_for(*term_after);
    ::kill(-pid, SIGTERM);
  }
  auto drain = [](int fd) {
    std::string s;
    char buf[4096];
    for (ssize_t n; (n = ::read(fd, buf, sizeof buf)) > 0;) s.append(buf, static_cast<size_t>(n));
    ::close(fd);
    return s;
  };
  Wrapped w;
  w.out = drain(out[0]);
  w.err = drain(err[0]);
  ::waitpid(pid, &w.status, 0);
  return w;
}

// The wrapper is invisible when the rank succeeds, reports an exit code and
// keeps it, reports a death by signal and dies by the same signal (as
// mpirun would have seen it), and outlives a signal the rank handles.
TEST(RankExitWrapper, ReportsTheRanksExitAndEndsAsItDid) {
  auto ok = run_rank_wrapper("echo hello; echo warn >&2");
  EXPECT_TRUE(WIFEXITED(ok.status) && WEXITSTATUS(ok.status) == 0);
  EXPECT_EQ(ok.out, "hello\n");
  EXPECT_EQ(ok.err, "warn\n");

  auto failed = run_rank_wrapper("echo bad batch >&2; exit 3");
  EXPECT_TRUE(WIFEXITED(failed.status) && WEXITSTATUS(failed.status) == 3);
  EXPECT_EQ(failed.err, "bad batch\nmuster: rank 1 exited with code 3\n");
  auto named = first_failed_rank("[1,1]<stderr>:" + failed.err.substr(failed.err.find("muster:")));
  ASSERT_TRUE(named);
  EXPECT_EQ(named->rank, 1);
  EXPECT_EQ(named->exit_code, 3);

  auto killed = run_rank_wrapper("kill -9 $$");
  EXPECT_TRUE(WIFSIGNALED(killed.status) && WTERMSIG(killed.status) == SIGKILL) << killed.status;
  EXPECT_EQ(killed.err, "muster: rank 1 was killed by signal 9\n");  // and no "Killed" of the shell's own

  // The rank dies with its wrapper (a wrapper killed alone leaves no rank).
  auto orphan = run_rank_wrapper("kill -9 $PPID; sleep 2; echo survived >&2");
  EXPECT_TRUE(WIFSIGNALED(orphan.status) && WTERMSIG(orphan.status) == SIGKILL) << orphan.status;
  EXPECT_EQ(orphan.err, "");

  auto handled = run_rank_wrapper("trap 'echo stopping; exit 0' TERM; while :; do sleep 0.02 2>/dev/null; done",
                                  std::chrono::milliseconds(300));
  EXPECT_TRUE(WIFEXITED(handled.status) && WEXITSTATUS(handled.status) == 0) << handled.status;
  EXPECT_EQ(handled.out, "stopping\n");
  EXPECT_EQ(handled.err, "");
}

// horovodrun -H on the notebook's own workers: nothing is launched, the ranks
// run on their hosts in the interpreter asked for, and the cluster never
// stops them.
TEST_F(ClusterManagerTest, MpiOnRunningWorkersLaunchesNothingAndLeavesThemRunning) {
  LaunchBatch b;
  b.request.n = 2;
  b.request.code = "import time; time.sleep(600)";
  auto mine = registry_->launch(b);
  ASSERT_TRUE(mine.is_ok());
  const std::string a = mine->at(0).id, z = mine->at(1).id;
  auto r = mpi_request(0, 1);
  r.workers = {a, z};
  r.n_workers = 2;
  r.python = "/venv/bin/python";
  // Not running yet: refused, naming the field.
  auto early = manager_->create(r);
  ASSERT_FALSE(early.is_ok());
  EXPECT_EQ(early.status().field(), "workers");
  ASSERT_TRUE(registry_->agent_register(a, "10.0.0.5", std::nullopt).is_ok());
  ASSERT_TRUE(registry_->agent_register(z, "10.0.0.6", std::nullopt).is_ok());
  const size_t launched = backend_.launched.size();
  auto c = create(r);
  EXPECT_EQ(backend_.launched.size(), launched);
  auto running = now(c.id);
  ASSERT_EQ(running.status, api::ClusterStatus::kRunning) << running.reason;
  EXPECT_EQ(running.hostfile, "10.0.0.5 slots=1\n10.0.0.6 slots=1\n");
  const auto& h = running.horovodrun_argv;
  const auto python = std::find(h.begin(), h.end(), "/venv/bin/python");
  ASSERT_NE(python, h.end());
  EXPECT_EQ(*(python + 1), "-u");
  EXPECT_EQ(running.workers_json()["worker"], (nlohmann::json{a, z}));
  launcher_->exit_code = 0;
  EXPECT_EQ(now(c.id).status, api::ClusterStatus::kSucceeded);
  EXPECT_EQ(worker(a).status, WorkerStatus::kRunning);
  EXPECT_EQ(worker(z).status, WorkerStatus::kRunning);
  EXPECT_FALSE(backend_.stopped.count(a));
  // A borrowed worker that ends while its host runs ranks fails the cluster.
  launcher_->exit_code.reset();
  auto c2 = create(r);
  ASSERT_EQ(now(c2.id).status, api::ClusterStatus::kRunning);
  ASSERT_TRUE(registry_->agent_exit(z, 0).is_ok());
  auto failed = now(c2.id);
  EXPECT_EQ(failed.status, api::ClusterStatus::kFailed);
  EXPECT_NE(failed.reason.find(z), std::string::npos) << failed.reason;
  EXPECT_EQ(worker(a).status, WorkerStatus::kRunning);
}

TEST_F(ClusterManagerTest, MpiLauncherFailureFailsTheCluster) {
  auto c = create(mpi_request(2, 1));
  register_all(c, false);
  ASSERT_EQ(now(c.id).status, api::ClusterStatus::kRunning);
  launcher_->exit_code = 1;
  auto failed = now(c.id);
  EXPECT_EQ(failed.status, api::ClusterStatus::kFailed);
  EXPECT_EQ(failed.reason.rfind("mpirun exited with code 1", 0), 0u) << failed.reason;
}

TEST_F(ClusterManagerTest, MpiWorkerLostAbortsTheLauncher) {
  auto c = create(mpi_request(2, 1));
  register_all(c, false);
  ASSERT_EQ(now(c.id).status, api::ClusterStatus::kRunning);
  ASSERT_TRUE(registry_->agent_exit(c.tasks[0].worker_id, 137).is_ok());
  auto failed = now(c.id);
  EXPECT_EQ(failed.status, api::ClusterStatus::kFailed);
  EXPECT_EQ(failed.reason,
            "worker 0 (id " + c.tasks[0].worker_id + ") failed with exit code 137; mpirun was aborted");
  EXPECT_TRUE(launcher_->terminated);
  EXPECT_EQ(worker(c.tasks[1].worker_id).status, WorkerStatus::kStopped);
}

TEST_F(ClusterManagerTest, MpiWithoutLaunchOnlyBuildsTheLines) {
  auto r = mpi_request(2, 1);
  r.launch = false;
  r.network_interfaces = {"eth0"};
  auto c = create(r);
  ASSERT_TRUE(registry_->agent_register(c.tasks[0].worker_id, "10.0.0.5", std::nullopt).is_ok());
  ASSERT_TRUE(registry_->agent_register(c.tasks[1].worker_id, "10.0.0.6", std::nullopt).is_ok());
  auto running = now(c.id);
  ASSERT_EQ(running.status, api::ClusterStatus::kRunning);
  EXPECT_TRUE(launcher_->started.empty());
  EXPECT_EQ(running.hostfile, "10.0.0.5 slots=1\n10.0.0.6 slots=1\n");
  auto json = running.to_json();
  EXPECT_EQ(json["horovodrun_command"],
            "horovodrun -np 2 -H 10.0.0.5:1,10.0.0.6:1 -p 2222 --network-interfaces eth0 /usr/bin/python3 -u " +
                (project_ / "train.py").string() + " --epochs 1");
  EXPECT_NE(json["mpirun_command"].get<std::string>().find(
                "-mca btl_tcp_if_include eth0 -mca oob_tcp_if_include eth0 -x NCCL_SOCKET_IFNAME=eth0"),
            std::string::npos);
}

// How mpirun reaches the hosts comes from the backend's MpiHosts, handed to
// the manager explicitly, and goes on mpirun's argument vector: the line
// shown is the line run (less musterd's own additions), and nothing travels
// through the environment.
TEST_F(ClusterManagerTest, MpiHostsAnswerGoesOnTheLaunchedLine) {
  FakeMpiHosts hosts;
  hosts.answer = workers::MpiLaunchSettings{"/opt/ompi", {"eth1"}, "ssh -i /k -l root"};
  make_manager(&hosts);
  auto r = mpi_request(2, 1);
  r.ssh_port = 2200;
  auto c = create(r);
  ASSERT_TRUE(registry_->agent_register(c.tasks[0].worker_id, "10.0.0.5", std::nullopt).is_ok());
  ASSERT_TRUE(registry_->agent_register(c.tasks[1].worker_id, "10.0.0.6", std::nullopt).is_ok());
  auto running = now(c.id);
  ASSERT_EQ(running.status, api::ClusterStatus::kRunning) << running.reason;
  ASSERT_EQ(hosts.asked.size(), 1u);
  EXPECT_EQ(hosts.asked[0].hosts, (std::vector<std::string>{"10.0.0.5", "10.0.0.6"}));
  EXPECT_EQ(hosts.asked[0].ssh_port, 2200);
  EXPECT_EQ(hosts.asked[0].program, "/usr/bin/python3");
  ASSERT_EQ(launcher_->started.size(), 1u);
  const auto& argv = launcher_->started[0].argv;
  EXPECT_EQ(without_launch_additions(argv), running.mpirun_argv);
  auto has = [&](std::vector<std::string> seq) { return std::search(argv.begin(), argv.end(), seq.begin(), seq.end()) != argv.end(); };
  EXPECT_TRUE(has({"--prefix", "/opt/ompi"})) << clusterspec::join_for_shell(argv);
  EXPECT_TRUE(has({"-mca", "btl_tcp_if_include", "eth1"})) << clusterspec::join_for_shell(argv);
  EXPECT_TRUE(has({"-mca", "plm_rsh_agent", "ssh -i /k -l root"})) << clusterspec::join_for_shell(argv);
  for (const auto& [name, value] : launcher_->started[0].env) {
    EXPECT_NE(name.rfind("OMPI_MCA_", 0), 0u) << name << " reached mpirun through its environment";
  }
}

TEST_F(ClusterManagerTest, FailingPreflightFailsTheClusterAndStartsNothing) {
  FakeMpiHosts hosts;
  hosts.answer = api::unavailable("root@10.0.0.6:2222: orted not found on the non-interactive PATH");
  make_manager(&hosts);
  auto c = create(mpi_request(2, 1));
  ASSERT_TRUE(registry_->agent_register(c.tasks[0].worker_id, "10.0.0.5", std::nullopt).is_ok());
  ASSERT_TRUE(registry_->agent_register(c.tasks[1].worker_id, "10.0.0.6", std::nullopt).is_ok());
  auto failed = now(c.id);
  EXPECT_EQ(failed.status, api::ClusterStatus::kFailed);
  EXPECT_EQ(failed.reason, "preflight failed: root@10.0.0.6:2222: orted not found on the non-interactive PATH");
  EXPECT_TRUE(launcher_->started.empty());
  EXPECT_TRUE(failed.mpirun_argv.empty());
  for (const auto& t : c.tasks) EXPECT_EQ(worker(t.worker_id).status, WorkerStatus::kStopped);
}

// horovodrun's tunables reach both lines and the cluster JSON.
TEST_F(ClusterManagerTest, HorovodOptionsReachBothLines) {
  auto r = mpi_request(2, 1);
  r.launch = false;
  r.network_interfaces = {"eth0", "eth1"};
  r.fusion_threshold_mb = 32;
  r.cycle_time_ms = 3.5;
  r.timeline_filename = "/tmp/timeline.json";
  r.start_timeout = 45;
  r.verbose = true;
  auto c = create(r);
  register_all(c, false);
  auto json = now(c.id).to_json();
  const std::string hvd = json["horovodrun_command"];
  EXPECT_NE(hvd.find("--network-interfaces eth0,eth1 --fusion-threshold-mb 32 --cycle-time-ms 3.5 "
                     "--timeline-filename /tmp/timeline.json --start-timeout 45 --verbose /usr/bin/python3"),
            std::string::npos)
      << hvd;
  const std::string mpi = json["mpirun_command"];
  for (const char* part : {"-x HOROVOD_FUSION_THRESHOLD=33554432", "-x HOROVOD_CYCLE_TIME=3.5",
                           "-x HOROVOD_TIMELINE=/tmp/timeline.json", "-x HOROVOD_START_TIMEOUT=45",
                           "-mca btl_tcp_if_include eth0,eth1", "-mca oob_tcp_if_include eth0,eth1"}) {
    EXPECT_NE(mpi.find(part), std::string::npos) << part << " not in " << mpi;
  }
  EXPECT_EQ(json["fusion_threshold_mb"], 32);
  EXPECT_EQ(json["cycle_time_ms"], 3.5);
  EXPECT_EQ(json["network_interfaces"], nlohmann::json({"eth0", "eth1"}));
  EXPECT_EQ(json["verbose"], true);
}

// TensorFlow 2's ParameterServerStrategy layout: ps + chief + workers in the
// ClusterSpec, the evaluator outside it; the chief's end ends the cluster
// and its log is the cluster's.
TEST_F(ClusterManagerTest, ChiefAndEvaluatorFollowTensorFlowsRules) {
  auto r = ps_request(1, 2);
  r.n_chief = 1;
  r.n_evaluator = 1;
  auto c = create(r);
  ASSERT_EQ(c.tasks.size(), 5u);
  std::vector<std::string> types;
  for (const auto& t : c.tasks) types.push_back(t.type + std::to_string(t.index));
  EXPECT_EQ(types, (std::vector<std::string>{"ps0", "chief0", "worker0", "worker1", "evaluator0"}));
  const std::string chief = c.tasks[1].worker_id, evaluator = c.tasks[4].worker_id;
  EXPECT_EQ(manager_->log_path(c.id).value(), registry_->log_path(chief).value());
  register_all(c, true);
  auto running = now(c.id);
  ASSERT_EQ(running.status, api::ClusterStatus::kRunning) << running.reason;
  EXPECT_EQ(running.cluster_spec.dump(),
            R"({"chief":["127.0.0.1:40001"],"ps":["127.0.0.1:40000"],"worker":["127.0.0.1:40002","127.0.0.1:40003"]})");
  for (const auto& t : c.tasks) {
    auto release = release_of(t.worker_id);
    ASSERT_TRUE(release.has_value());
    auto config = clusterspec::TfConfig::parse(release->env.at("TF_CONFIG"));  // validates per TF's rules
    EXPECT_EQ(config.task_type, t.type);
    EXPECT_EQ(config.cluster.to_json(), running.cluster_spec);
    EXPECT_EQ(config.is_chief(), t.type == "chief");
  }
  // Workers that serve forever do not hold the cluster up: the chief decides.
  ASSERT_TRUE(registry_->agent_exit(chief, 0).is_ok());
  auto done = now(c.id);
  EXPECT_EQ(done.status, api::ClusterStatus::kSucceeded) << done.reason;
  EXPECT_EQ(worker(c.tasks[2].worker_id).status, WorkerStatus::kStopped);
  EXPECT_EQ(worker(evaluator).status, WorkerStatus::kStopped);
  EXPECT_EQ(done.to_json()["n_chief"], 1);
  EXPECT_EQ(done.to_json()["workers"]["evaluator"], nlohmann::json({evaluator}));
}

TEST_F(ClusterManagerTest, FailingEvaluatorFailsTheCluster) {
  auto r = ps_request(1, 1);
  r.n_evaluator = 1;
  auto c = create(r);
  register_all(c, true);
  ASSERT_EQ(now(c.id).status, api::ClusterStatus::kRunning);
  ASSERT_TRUE(registry_->agent_exit(c.tasks[2].worker_id, 2).is_ok());
  auto failed = now(c.id);
  EXPECT_EQ(failed.status, api::ClusterStatus::kFailed);
  EXPECT_EQ(failed.reason, "evaluator 0 (id " + c.tasks[2].worker_id + ") failed with exit code 2");
}

// mpi ranks with GPUs: each rank sees its host's reserved devices, and the
// wrapper hands local rank r device r (run here with /bin/sh for real).
TEST_F(ClusterManagerTest, MpiRanksGetTheirHostsDevices) {
  GpuInventory gpus({0, 1, 2, 3});
  RegistryOptions ro;
  ro.state_dir = root_ / "state";
  ro.project_dir = project_;
  ro.agent_path = "/bin/true";
  ro.daemon_port = 1;
  ro.async_backend = false;
  ro.gpus = &gpus;
  manager_.reset();
  registry_ = std::make_unique<WorkerRegistry>(ro, backend_, nullptr, clock_);
  make_manager();
  auto r = mpi_request(3, 1);
  r.nvidia_gpu = 1;
  auto c = create(r);
  // Two workers share 10.0.0.5 (one host, 2 slots), one is on 10.0.0.6.
  ASSERT_TRUE(registry_->agent_register(c.tasks[0].worker_id, "10.0.0.5", std::nullopt).is_ok());
  ASSERT_TRUE(registry_->agent_register(c.tasks[1].worker_id, "10.0.0.6", std::nullopt).is_ok());
  ASSERT_TRUE(registry_->agent_register(c.tasks[2].worker_id, "10.0.0.5", std::nullopt).is_ok());
  auto running = now(c.id);
  ASSERT_EQ(running.status, api::ClusterStatus::kRunning) << running.reason;
  const auto& argv = launcher_->started.at(0).argv;
  auto env = std::find(argv.begin(), argv.end(), "MUSTER_RANK_GPUS=0,2;0,2;1");
  EXPECT_NE(env, argv.end()) << clusterspec::join_for_shell(argv);
  // Launched: the exit report's wrapper, then the GPU one, then the command.
  auto sh = std::find(argv.begin(), argv.end(), "/bin/sh");
  ASSERT_NE(sh, argv.end());
  EXPECT_EQ(*(sh + 2), kRankExitWrapper);
  EXPECT_EQ(*(sh + 4), "/bin/sh");
  EXPECT_EQ(*(sh + 6), kRankGpuWrapper);
  EXPECT_EQ(*(sh + 8), "/usr/bin/python3");
  // Global rank 1 is local rank 1 on the first host: devices 0,2, its own 2.
  const std::string cmd = "MUSTER_RANK_GPUS='0,2;0,2;1' OMPI_COMM_WORLD_RANK=1 OMPI_COMM_WORLD_LOCAL_RANK=1 "
                          "/bin/sh -c '" + std::string(kRankGpuWrapper) + "' muster-rank /bin/sh -c "
                          "'echo $CUDA_VISIBLE_DEVICES/$NVIDIA_VISIBLE_DEVICES/$MUSTER_GPU_DEVICE'";
  FILE* p = ::popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  char buf[128] = {};
  const size_t n = std::fread(buf, 1, sizeof buf - 1, p);
  ::pclose(p);
  EXPECT_EQ(std::string(buf, n), "0,2/0,2/2\n");
  // ps clusters: the workers get their GPUs, the parameter servers none
  // (one device is left: a PS that took one would make this fail).
  auto ps = ps_request(1, 1);
  ps.nvidia_gpu = 1;
  auto pc = create(ps);
  ASSERT_EQ(pc.tasks.size(), 2u);
  EXPECT_EQ(worker(pc.tasks[0].worker_id).gpu_devices, "");
  EXPECT_EQ(worker(pc.tasks[1].worker_id).gpu_devices, "3");
  manager_.reset();  // before `gpus` goes
  registry_.reset();
}

TEST_F(ClusterManagerTest, RestartFailsClustersThatHadNotEnded) {
  auto done = create(ps_request(0, 1));
  register_all(done, true);
  ASSERT_EQ(now(done.id).status, api::ClusterStatus::kRunning);
  ASSERT_TRUE(registry_->agent_exit(done.tasks[0].worker_id, 0).is_ok());
  ASSERT_EQ(now(done.id).status, api::ClusterStatus::kSucceeded);
  auto open = create(ps_request(1, 1));

  make_manager();  // a new daemon over the same store
  ASSERT_TRUE(manager_->restore().is_ok());
  auto list = manager_->list();
  ASSERT_EQ(list.size(), 2u);
  EXPECT_EQ(list[0].id, done.id);
  EXPECT_EQ(list[0].status, api::ClusterStatus::kSucceeded);
  EXPECT_EQ(list[1].id, open.id);
  EXPECT_EQ(list[1].status, api::ClusterStatus::kFailed);
  EXPECT_EQ(list[1].reason, "the daemon restarted while the cluster was starting; its tasks were stopped");
  EXPECT_EQ(list[1].tasks.size(), 2u);
  for (const auto& t : open.tasks) EXPECT_EQ(worker(t.worker_id).status, WorkerStatus::kStopped);
}

// "METHOD /path" of every route documented in api/openapi.yaml (line scan:
// paths are two-space keys starting with '/', methods four-space keys).
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
      for (auto& c : method) c = static_cast<char>(std::toupper(c));
      out.insert(method + " " + path);
    }
  }
  return out;
}

TEST_F(ClusterManagerTest, EveryClusterRouteIsInOpenApi) {
  Router router;
  register_cluster_routes(router, *manager_, 16);
  const auto documented = documented_routes();
  ASSERT_EQ(router.routes().size(), 6u);
  for (const auto& r : router.routes()) {
    EXPECT_TRUE(documented.count(r.method + " " + r.pattern)) << r.method << " " << r.pattern << " is not documented";
  }
}

TEST_F(ClusterManagerTest, RoutesAnswerWithTheClusterObject) {
  Router router;
  register_cluster_routes(router, *manager_, 16);
  auto call = [&](const std::string& method, const std::string& path, nlohmann::json body) {
    auto match = router.match(method, path);
    EXPECT_TRUE(match.is_ok()) << method << " " << path;
    Request req;
    req.method = method;
    req.path = path;
    req.params = match->params;
    req.body = std::move(body);
    Response out;
    match->route->handler(req, [&](Response r) { out = std::move(r); });
    return out;
  };
  auto created = call("POST", "/api/v1/clusters", {{"n_workers", 2}, {"n_ps", 1}, {"worker_script", "train.py"}});
  ASSERT_EQ(created.http_status, 201) << created.body;
  auto c = nlohmann::json::parse(created.body);
  EXPECT_EQ(c["status"], "starting");
  EXPECT_EQ(c["workers"]["worker"].size(), 2u);
  auto got = call("GET", "/api/v1/clusters/" + c["id"].get<std::string>(), nullptr);
  EXPECT_EQ(got.http_status, 200);
  auto listed = nlohmann::json::parse(call("GET", "/api/v1/clusters", nullptr).body);
  EXPECT_EQ(listed["clusters"].size(), 1u);
  auto stopped = call("POST", "/api/v1/clusters/" + c["id"].get<std::string>() + "/stop", nullptr);
  EXPECT_EQ(stopped.http_status, 200);
  EXPECT_EQ(nlohmann::json::parse(stopped.body)["status"], "stopped");
  auto bad = call("POST", "/api/v1/clusters", {{"n_workers", 99}});
  EXPECT_EQ(bad.http_status, 400);
  EXPECT_EQ(nlohmann::json::parse(bad.body)["error"]["field"], "n_workers");
  EXPECT_EQ(call("GET", "/api/v1/clusters/c-none", nullptr).http_status, 404);
}

TEST_F(ClusterManagerTest, LogsRouteServesTheLauncherLogOrTheChiefs) {
  Router router;
  register_cluster_routes(router, *manager_, 16);
  auto logs = [&](const std::string& id, std::optional<std::string> tail = std::nullopt) {
    const std::string path = "/api/v1/clusters/" + id + "/logs";
    auto match = router.match("GET", path);
    EXPECT_TRUE(match.is_ok()) << path;
    Request req;
    req.method = "GET";
    req.path = path;
    req.params = match->params;
    if (tail) req.query["tail"] = *tail;
    Response out;
    out.http_status = -1;
    match->route->handler(req, [&](Response r) { out = std::move(r); });
    return out;
  };

  // mpi: the launcher's log, which does not exist until mpirun starts.
  auto mpi = create(mpi_request(2, 1));
  auto empty = logs(mpi.id);
  EXPECT_EQ(empty.http_status, 200);
  EXPECT_EQ(empty.body, "");
  register_all(mpi, false);
  ASSERT_EQ(now(mpi.id).status, api::ClusterStatus::kRunning);
  ASSERT_EQ(launcher_->started.size(), 1u);
  EXPECT_EQ(launcher_->started[0].log_path, root_ / "state" / "clusters" / mpi.id / "launcher.log");
  std::ofstream(launcher_->started[0].log_path) << "[1,0]<stdout>:step 1\n[1,1]<stdout>:step 1\n[1,0]<stdout>:accuracy 0.9\n";
  auto all = logs(mpi.id);
  EXPECT_EQ(all.http_status, 200);
  EXPECT_EQ(all.content_type.rfind("text/plain", 0), 0u) << all.content_type;
  EXPECT_EQ(all.body, "[1,0]<stdout>:step 1\n[1,1]<stdout>:step 1\n[1,0]<stdout>:accuracy 0.9\n");
  EXPECT_EQ(logs(mpi.id, "1").body, "[1,0]<stdout>:accuracy 0.9\n");
  EXPECT_EQ(logs(mpi.id, "0").body, "");  // tail=0: none of the earlier lines

  // The worker logs route's validation of tail.
  for (const std::string bad : {"-1", "x", "1.5", ""}) {
    auto r = logs(mpi.id, bad);
    EXPECT_EQ(r.http_status, 400) << "tail=" << bad;
    EXPECT_EQ(nlohmann::json::parse(r.body)["error"]["field"], "tail") << "tail=" << bad;
  }
  EXPECT_EQ(logs("c-none").http_status, 404);
  EXPECT_EQ(logs("c-none", "x").http_status, 400);

  // mpi without launch never has a log: empty text, not an error.
  auto lines_only = mpi_request(1, 1);
  lines_only.launch = false;
  auto unlaunched = create(lines_only);
  register_all(unlaunched, false);
  ASSERT_EQ(now(unlaunched.id).status, api::ClusterStatus::kRunning);
  auto none = logs(unlaunched.id);
  EXPECT_EQ(none.http_status, 200);
  EXPECT_EQ(none.body, "");

  // ps: the chief's (worker task 0's) log, not a PS's nor worker 1's.
  auto ps = create(ps_request(1, 2));
  for (const auto& t : ps.tasks) {
    auto path = registry_->log_path(t.worker_id);
    ASSERT_TRUE(path.is_ok());
    fs::create_directories(path->parent_path());
    std::ofstream(path.value()) << t.type << " " << t.index << "\n";
  }
  ASSERT_EQ(ps.tasks.size(), 3u);
  EXPECT_EQ(logs(ps.id).body, "worker 0\n");
}

TEST_F(ClusterManagerTest, UnknownClusterIsNotFound) {
  EXPECT_EQ(manager_->get("c-nope").status().code(), api::ErrorCode::kNotFound);
  EXPECT_EQ(manager_->stop("c-nope").status().code(), api::ErrorCode::kNotFound);
}

api::ClusterRequest torchrun_request(int n_workers, int nproc_per_node) {
  api::ClusterRequest r;
  r.mode = api::ClusterKind::kTorchrun;
  r.n_workers = n_workers;
  r.nproc_per_node = nproc_per_node;
  r.worker_script = "train.py";
  r.args = {"--epochs", "1"};
  return r;
}

TEST_F(ClusterManagerTest, TorchrunReleasesEveryProcessWithTorchrunsEnvironment) {
  auto r = torchrun_request(2, 2);
  r.max_restarts = 3;
  auto c = create(r);
  ASSERT_EQ(c.tasks.size(), 2u);
  ASSERT_EQ(backend_.launched.size(), 2u);
  for (const auto& spec : backend_.launched) EXPECT_EQ(spec.env.at("MUSTER_RESERVE_PORT"), "1");  // held, with a port
  register_all(c, true);  // ports 40000, 40001
  c = now(c.id);
  ASSERT_EQ(c.status, api::ClusterStatus::kRunning) << c.reason;
  EXPECT_EQ(c.torchrun_argv,
            (std::vector<std::string>{"torchrun", "--nnodes=2", "--nproc_per_node=2", "--rdzv_backend=c10d",
                                      "--rdzv_endpoint=127.0.0.1:40000", "--rdzv_id=" + c.id, "--max_restarts=3",
                                      (project_ / "train.py").string(), "--epochs", "1"}));
  for (int node = 0; node < 2; ++node) {
    auto release = release_of(c.tasks[static_cast<size_t>(node)].worker_id);
    ASSERT_TRUE(release.has_value());
    EXPECT_EQ(release->env.at("MASTER_ADDR"), "127.0.0.1");
    EXPECT_EQ(release->env.at("MASTER_PORT"), "40000");  // worker 0's reserved port
    EXPECT_EQ(release->env.at("WORLD_SIZE"), "4");
    EXPECT_EQ(release->env.at("GROUP_RANK"), std::to_string(node));
    EXPECT_EQ(release->env.at("TORCHELASTIC_RUN_ID"), c.id);
    EXPECT_EQ(release->env.at("TORCHELASTIC_MAX_RESTARTS"), "3");
    EXPECT_EQ(release->env.at("OMP_NUM_THREADS"), "1");
    EXPECT_EQ(release->env.count("RANK"), 0u);  // per process
    EXPECT_EQ(release->interface_env,
              (std::vector<std::string>{"GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME", "MUSTER_COMM_TCP_IFACE"}));
    ASSERT_EQ(release->processes.size(), 2u);
    for (int local = 0; local < 2; ++local) {
      const std::string rank = std::to_string(node * 2 + local);
      EXPECT_EQ(release->processes[static_cast<size_t>(local)],
                (std::map<std::string, std::string>{{"LOCAL_RANK", std::to_string(local)}, {"RANK", rank},
                                                    {"ROLE_RANK", rank}}));
    }
  }
  ASSERT_TRUE(registry_->agent_exit(c.tasks[0].worker_id, 0).is_ok());
  EXPECT_EQ(now(c.id).status, api::ClusterStatus::kRunning);  // a node that finished may end early
  ASSERT_TRUE(registry_->agent_exit(c.tasks[1].worker_id, 0).is_ok());
  EXPECT_EQ(now(c.id).status, api::ClusterStatus::kSucceeded);
}

TEST_F(ClusterManagerTest, TorchrunKeepsTheCallersThreadsAndRunsOneProcessPerWorker) {
  auto r = torchrun_request(2, 1);
  r.env = {{"OMP_NUM_THREADS", "4"}};
  auto c = create(r);
  register_all(c, true);
  ASSERT_EQ(now(c.id).status, api::ClusterStatus::kRunning);
  auto release = release_of(c.tasks[1].worker_id);
  ASSERT_TRUE(release.has_value());
  EXPECT_TRUE(release->processes.empty());
  EXPECT_EQ(release->env.at("RANK"), "1");
  EXPECT_EQ(release->env.at("LOCAL_RANK"), "0");
  EXPECT_EQ(release->env.count("OMP_NUM_THREADS"), 0u);  // the launch env's 4 stays
  EXPECT_EQ(backend_.launched[1].env.at("OMP_NUM_THREADS"), "4");
}

TEST_F(ClusterManagerTest, TorchrunNamesTheRankThatDiedFirst) {
  auto c = create(torchrun_request(3, 1));
  register_all(c, true);
  ASSERT_EQ(now(c.id).status, api::ClusterStatus::kRunning);
  // Rank 2 is killed; a second later rank 0 fails on the broken link.
  ASSERT_TRUE(registry_->agent_exit(c.tasks[2].worker_id, 137).is_ok());
  clock_.advance(std::chrono::seconds(1));
  ASSERT_TRUE(registry_->agent_exit(c.tasks[0].worker_id, 1).is_ok());
  c = now(c.id);
  EXPECT_EQ(c.status, api::ClusterStatus::kFailed);
  EXPECT_EQ(c.reason, "worker 2 (id " + c.tasks[2].worker_id + ", rank 2) failed with exit code 137; then failed: rank 0");
  ASSERT_TRUE(c.failed_rank);
  EXPECT_EQ(c.failed_rank->rank, 2);
  EXPECT_EQ(c.failed_rank->signal, 9);
  EXPECT_TRUE(backend_.stopped.count(c.tasks[1].worker_id));  // the survivor is stopped
}

// Rank 0 ends first, of rank 1's failure (its exception names rank 1): the
// cluster waits for rank 1, still printing its traceback, and names it with
// its exception; rank 0 then failed.
TEST_F(ClusterManagerTest, TorchrunWaitsForTheRankItsVictimBlames) {
  auto c = create(torchrun_request(2, 1));
  register_all(c, true);
  ASSERT_EQ(now(c.id).status, api::ClusterStatus::kRunning);
  auto log_of = [&](size_t task) { return registry_->log_path(c.tasks[task].worker_id).value(); };
  std::ofstream(log_of(0)) << "Traceback (most recent call last):\n  File \"train.py\", line 7\n"
                              "RuntimeError: muster backend: allreduce #3: rank 1 (pid 812, this host) has exited\n";
  ASSERT_TRUE(registry_->agent_exit(c.tasks[0].worker_id, 1).is_ok());
  EXPECT_EQ(now(c.id).status, api::ClusterStatus::kRunning);  // waiting for the rank it blames
  clock_.advance(std::chrono::seconds(1));
  std::ofstream(log_of(1)) << "Traceback (most recent call last):\n  File \"train.py\", line 5\n"
                              "FileNotFoundError: [Errno 2] No such file or directory: 'config.json'\n";
  ASSERT_TRUE(registry_->agent_exit(c.tasks[1].worker_id, 1).is_ok());
  c = now(c.id);
  EXPECT_EQ(c.status, api::ClusterStatus::kFailed);
  ASSERT_TRUE(c.failed_rank);
  EXPECT_EQ(c.failed_rank->rank, 1);
  EXPECT_EQ(c.failed_rank->worker_id, c.tasks[1].worker_id);
  EXPECT_EQ(c.failed_rank->exception, "FileNotFoundError: [Errno 2] No such file or directory: 'config.json'");
  EXPECT_EQ(c.reason, "worker 1 (id " + c.tasks[1].worker_id +
                          ", rank 1) failed with exit code 1: FileNotFoundError: [Errno 2] No such file or directory: "
                          "'config.json'; then failed: rank 0 (RuntimeError: muster backend: allreduce #3: rank 1 "
                          "(pid 812, this host) has exited)");
  // The worker's own reason carries its exception line too.
  EXPECT_EQ(worker(c.tasks[1].worker_id).reason,
            "the script exited with code 1: FileNotFoundError: [Errno 2] No such file or directory: 'config.json'");
}

// A victim whose peer never ends: after kRootCauseGrace the cluster fails
// with what it has, naming the rank that ended.
TEST_F(ClusterManagerTest, TorchrunGivesUpWaitingAfterTheGrace) {
  auto c = create(torchrun_request(2, 1));
  register_all(c, true);
  ASSERT_EQ(now(c.id).status, api::ClusterStatus::kRunning);
  std::ofstream(registry_->log_path(c.tasks[0].worker_id).value())
      << "Traceback (most recent call last):\nmuster.torch.engine.EngineStopped: muster.torch was shut down on rank 1\n";
  ASSERT_TRUE(registry_->agent_exit(c.tasks[0].worker_id, 1).is_ok());
  EXPECT_EQ(now(c.id).status, api::ClusterStatus::kRunning);
  clock_.advance(kRootCauseGrace);
  c = now(c.id);
  EXPECT_EQ(c.status, api::ClusterStatus::kFailed);
  ASSERT_TRUE(c.failed_rank);
  EXPECT_EQ(c.failed_rank->rank, 0);
}

TEST_F(ClusterManagerTest, TorchrunScriptMustResolve) {
  auto r = torchrun_request(2, 1);
  r.worker_script = "missing.py";
  auto c = manager_->create(r);
  ASSERT_FALSE(c.is_ok());
  EXPECT_EQ(c.status().field(), "worker_script");
  EXPECT_TRUE(backend_.launched.empty());
}

}  // namespace
}  // namespace muster::service
