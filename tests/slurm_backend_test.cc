// The Slurm backend without a Slurm: sbatch's argv, squeue/sinfo JSON
// parsing, the job-state mapping, and SlurmBackend + WorkerRegistry over a
// FakeSlurm (tests/fake_slurm.h) that records submissions and hands out job
// states. The real Slurm is exercised by tests/slurm_integration_test.py.
#include <sys/stat.h>

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <mutex>

#include "service/registry/registry.h"
#include "tests/fake_slurm.h"
#include "workers/slurm/job_state.h"
#include "workers/slurm/slurm_backend.h"

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using muster::api::WorkerStatus;
using muster::workers::LaunchSpec;
using muster::workers::ProcessState;
namespace slurm = muster::workers::slurm;

namespace {

TEST(SbatchArgv, CarriesEveryResourceAndOption) {
  slurm::JobSpec spec;
  spec.name = "muster-abc";
  spec.script = "/s/w/abc/slurm-job.sh";
  spec.output = "/s/w/abc/output.log";
  spec.working_dir = "/s/w/abc";
  spec.cpus_per_task = 2;
  spec.memory_mb = 1536;
  spec.gpus = 1;
  spec.partition = "gpu";
  spec.account = "ml";
  spec.qos = "high";
  spec.time_limit = "1:00:00";
  const std::vector<std::string> want = {
      "sbatch", "--parsable", "--job-name=muster-abc", "--output=/s/w/abc/output.log", "--open-mode=append",
      "--chdir=/s/w/abc", "--nodes=1", "--ntasks=1", "--cpus-per-task=2", "--mem=1536M", "--export=ALL",
      "--gres=gpu:1", "--partition=gpu", "--account=ml", "--qos=high", "--time=1:00:00", "/s/w/abc/slurm-job.sh"};
  EXPECT_EQ(slurm::sbatch_argv(spec), want);
  spec.gpus = 0;
  spec.partition = spec.account = spec.qos = spec.time_limit = "";
  const auto argv = slurm::sbatch_argv(spec);
  for (const auto& a : argv) {
    EXPECT_EQ(a.find("--gres"), std::string::npos);
    EXPECT_EQ(a.find("--partition"), std::string::npos);
  }
}

TEST(SqueueJson, ParsesStatesReasonsAndExitCodes) {
  // Shapes as Slurm 22.05 prints them, and the flag-list / {"set","number"}
  // forms of later versions.
  const std::string text = R"({"jobs": [
    {"job_id": 11, "job_state": "FAILED", "state_reason": "NonZeroExitCode", "nodes": "n1", "exit_code": 768},
    {"job_id": 12, "job_state": "PENDING", "state_reason": "Resources", "nodes": "", "exit_code": 0},
    {"job_id": 13, "job_state": "CANCELLED", "state_reason": "None", "nodes": "n2", "exit_code": 15},
    {"job_id": {"set": true, "number": 14}, "job_state": ["RUNNING"], "state_reason": "None", "nodes": "n2",
     "exit_code": {"status": ["SUCCESS"], "return_code": {"set": true, "number": 0}}}
  ]})";
  auto jobs = slurm::parse_squeue_json(text);
  ASSERT_TRUE(jobs.is_ok()) << jobs.status().message();
  ASSERT_EQ(jobs.value().size(), 4u);
  EXPECT_EQ(jobs.value().at("11").state, "FAILED");
  EXPECT_EQ(jobs.value().at("11").exit_code, 3);
  EXPECT_EQ(jobs.value().at("12").reason, "Resources");
  EXPECT_EQ(jobs.value().at("13").signal, 15);
  EXPECT_EQ(jobs.value().at("14").state, "RUNNING");
  EXPECT_EQ(jobs.value().at("14").exit_code, 0);

  for (const std::string bad : {"", "not json", "[]", R"({"jobs": 3})", R"({"jobs": [{"job_state": "RUNNING"}]})"}) {
    auto r = slurm::parse_squeue_json(bad);
    EXPECT_FALSE(r.is_ok()) << bad;
    EXPECT_NE(r.status().message().find("squeue"), std::string::npos) << r.status().message();
  }
}

TEST(SinfoJson, ParsesNodeStates) {
  auto nodes = slurm::parse_sinfo_nodes_json(
      R"({"nodes": [{"name": "n1", "address": "10.1.0.2", "state": "idle", "state_flags": []},
                    {"name": "n2", "state": "down", "state_flags": ["NOT_RESPONDING"]},
                    {"name": "n3", "state": ["DOWN", "NOT_RESPONDING"]}]})");
  ASSERT_TRUE(nodes.is_ok());
  EXPECT_EQ(nodes.value().at("n1").flags, std::vector<std::string>{"idle"});
  EXPECT_EQ(nodes.value().at("n1").address, "10.1.0.2");
  EXPECT_EQ(nodes.value().at("n2").flags, (std::vector<std::string>{"down", "NOT_RESPONDING"}));
  EXPECT_EQ(nodes.value().at("n3").flags, (std::vector<std::string>{"DOWN", "NOT_RESPONDING"}));
  EXPECT_FALSE(slurm::parse_sinfo_nodes_json("{}").is_ok());
}

TEST(JobState, MapsEverySlurmStateOntoAWorkerOutcome) {
  struct Case {
    std::string state;
    ProcessState process;
    std::optional<WorkerStatus> outcome;
    std::string in_reason;
  };
  const std::vector<Case> cases = {
      {"PENDING", ProcessState::kPending, std::nullopt, "Resources"},
      {"REQUEUED", ProcessState::kPending, std::nullopt, "queued"},
      {"CONFIGURING", ProcessState::kRunning, std::nullopt, ""},
      {"RUNNING", ProcessState::kRunning, std::nullopt, ""},
      {"COMPLETING", ProcessState::kRunning, std::nullopt, ""},
      {"COMPLETED", ProcessState::kExited, std::nullopt, "COMPLETED"},
      {"FAILED", ProcessState::kExited, WorkerStatus::kFailed, "FAILED"},
      {"TIMEOUT", ProcessState::kExited, WorkerStatus::kFailed, "time limit"},
      {"OUT_OF_MEMORY", ProcessState::kExited, WorkerStatus::kFailed, "out of memory"},
      {"CANCELLED", ProcessState::kExited, WorkerStatus::kStopped, "scancel"},
      {"PREEMPTED", ProcessState::kExited, WorkerStatus::kStopped, "preempted"},
      {"NODE_FAIL", ProcessState::kLost, WorkerStatus::kLost, "node failed"},
      {"BOOT_FAIL", ProcessState::kExited, WorkerStatus::kFailed, "BOOT_FAIL"},
  };
  for (const auto& c : cases) {
    slurm::JobInfo job;
    job.job_id = "7";
    job.state = c.state;
    job.reason = c.state == "PENDING" ? "Resources" : "None";
    job.exit_code = 0;
    const auto st = slurm::to_process_status(job);
    EXPECT_EQ(st.state, c.process) << c.state;
    EXPECT_EQ(st.outcome, c.outcome) << c.state;
    EXPECT_NE(st.reason.find(c.in_reason), std::string::npos) << c.state << ": " << st.reason;
  }
  slurm::JobInfo killed;
  killed.job_id = "8";
  killed.state = "CANCELLED";
  killed.signal = 9;
  EXPECT_EQ(slurm::to_process_status(killed).exit_code, 137);
}

using muster::testing::FakeSlurm;

class SlurmBackendTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/muster-slurm-unit-XXXXXX";
    dir_ = mkdtemp(tmpl);
    fake_ = std::make_shared<FakeSlurm::Shared>();
    backend_ = make();
  }
  void TearDown() override {
    backend_.reset();
    fs::remove_all(dir_);
  }
  std::unique_ptr<slurm::SlurmBackend> make() {
    auto opts = slurm::SlurmOptions::from_map(dir_, {{"master_address", "10.0.0.1"},
                                                     {"partition", "debug"},
                                                     {"poll_ms", "60000"}});
    EXPECT_TRUE(opts.is_ok());
    auto b = slurm::SlurmBackend::create(opts.value(), std::make_unique<FakeSlurm>(fake_));
    EXPECT_TRUE(b.is_ok()) << b.status().message();
    return std::move(b).value();
  }
  LaunchSpec spec(const std::string& id) {
    LaunchSpec s;
    s.worker_id = id;
    s.cpu = 0.5;
    s.memory_gb = 1.5;
    s.agent_argv = {"/opt/muster/muster-agent", "--code", "print('it''s')"};
    s.env = {{"MUSTER_WORKER_ID", id}, {"QUOTED", "a'b $HOME \"c\""}};
    s.working_dir = dir_ / id;
    s.log_path = dir_ / id / "output.log";
    fs::create_directories(s.working_dir);
    return s;
  }
  void set_job(const std::string& id, const std::string& state, const std::string& reason = "None",
               const std::string& nodes = "n1", std::optional<int> code = 0) {
    std::lock_guard<std::mutex> lock(fake_->mu);
    fake_->jobs[id] = {id, state, reason, nodes, code, std::nullopt};
  }

  fs::path dir_;
  std::shared_ptr<FakeSlurm::Shared> fake_;
  std::unique_ptr<slurm::SlurmBackend> backend_;
};

TEST_F(SlurmBackendTest, OptionsNeedTheMasterAddressAndRejectUnknownKeys) {
  auto none = slurm::SlurmOptions::from_map(dir_, {});
  ASSERT_FALSE(none.is_ok());
  EXPECT_NE(none.status().message().find("master_address"), std::string::npos);
  auto unknown = slurm::SlurmOptions::from_map(dir_, {{"master_address", "1.2.3.4"}, {"partiton", "x"}});
  ASSERT_FALSE(unknown.is_ok());
  EXPECT_NE(unknown.status().message().find("partiton"), std::string::npos);
  EXPECT_FALSE(slurm::SlurmOptions::from_map(dir_, {{"master_address", "1.2.3.4"}, {"poll_ms", "x"}}).is_ok());
  EXPECT_FALSE(slurm::SlurmOptions::from_map(dir_, {{"master_address", "1.2.3.4"}, {"qos", "a b"}}).is_ok());
}

TEST_F(SlurmBackendTest, LaunchSubmitsOneJobPerWorkerWithItsResources) {
  ASSERT_TRUE(backend_->launch({spec("w1"), spec("w2")}).is_ok());
  ASSERT_EQ(fake_->submitted.size(), 2u);
  const auto& job = fake_->submitted[0];
  EXPECT_EQ(job.name, "muster-w1");
  EXPECT_EQ(job.cpus_per_task, 1);  // ceil(0.5)
  EXPECT_EQ(job.memory_mb, 1536);   // 1.5 GiB
  EXPECT_EQ(job.partition, "debug");
  EXPECT_EQ(job.output, dir_ / "w1" / "output.log");
  // The script carries the agent token: owner-only, and every word survives sh.
  struct stat st{};
  ASSERT_EQ(::stat(job.script.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  const std::string out = dir_ / "echo.out";
  {
    std::ofstream probe(dir_ / "probe.sh");
    std::ifstream script(job.script);
    std::string text((std::istreambuf_iterator<char>(script)), std::istreambuf_iterator<char>());
    // Run the script's exports, then print the variable and the agent's argv instead of exec'ing it.
    const auto exec_at = text.rfind("exec ");
    probe << text.substr(0, exec_at) << "printf '%s\\n' \"$QUOTED\" > " << out << "\nset -- "
          << text.substr(exec_at + 5) << "printf '%s\\n' \"$@\" >> " << out << "\n";
  }
  ASSERT_EQ(std::system(("sh " + (dir_ / "probe.sh").string()).c_str()), 0);
  std::ifstream got(out);
  std::string line;
  std::vector<std::string> lines;
  while (std::getline(got, line)) lines.push_back(line);
  EXPECT_EQ(lines, (std::vector<std::string>{"a'b $HOME \"c\"", "/opt/muster/muster-agent", "--code", "print('it''s')"}));
  EXPECT_EQ(backend_->job_of("w1"), "100");
  EXPECT_EQ(backend_->job_of("w2"), "101");
}

TEST_F(SlurmBackendTest, AFailedSubmissionCancelsTheJobsAlreadySubmitted) {
  fake_->fail_submit_at = 1;
  auto s = backend_->launch({spec("w1"), spec("w2"), spec("w3")});
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("w2"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("Invalid partition"), std::string::npos) << s.message();
  EXPECT_EQ(fake_->cancelled, std::vector<std::string>{"100"});
  EXPECT_EQ(backend_->job_of("w1"), "");
}

TEST_F(SlurmBackendTest, PollFollowsTheJobFromQueueToEnd) {
  ASSERT_TRUE(backend_->launch({spec("w1")}).is_ok());
  auto st = backend_->poll("w1");
  EXPECT_EQ(st.state, ProcessState::kPending);  // before squeue answered
  backend_->refresh();
  st = backend_->poll("w1");
  EXPECT_EQ(st.state, ProcessState::kPending);
  EXPECT_NE(st.reason.find("Priority"), std::string::npos) << st.reason;
  set_job("100", "RUNNING");
  backend_->refresh();
  EXPECT_EQ(backend_->poll("w1").state, ProcessState::kRunning);
  // Its node stops answering: lost, naming the node.
  fake_->nodes["n1"] = {"10.0.0.2", {"DOWN", "NOT_RESPONDING"}};
  backend_->refresh();
  st = backend_->poll("w1");
  EXPECT_EQ(st.state, ProcessState::kLost);
  EXPECT_NE(st.reason.find("n1"), std::string::npos) << st.reason;
  fake_->nodes["n1"] = {"10.0.0.2", {"IDLE"}};
  set_job("100", "TIMEOUT", "TimeLimit", "n1", 0);
  backend_->refresh();
  st = backend_->poll("w1");
  EXPECT_EQ(st.state, ProcessState::kExited);
  EXPECT_EQ(st.outcome, WorkerStatus::kFailed);
  EXPECT_NE(st.reason.find("time limit"), std::string::npos) << st.reason;
  EXPECT_EQ(backend_->poll("nobody").state, ProcessState::kUnknown);
}

TEST_F(SlurmBackendTest, StopCancelsAndARestartedBackendReadoptsJobs) {
  ASSERT_TRUE(backend_->launch({spec("w1"), spec("w2")}).is_ok());
  ASSERT_TRUE(backend_->stop("w1", 1s).is_ok());
  EXPECT_EQ(fake_->cancelled, std::vector<std::string>{"100"});
  set_job("101", "RUNNING");
  backend_.reset();  // the daemon goes; the jobs stay
  backend_ = make();
  EXPECT_EQ(backend_->job_of("w2"), "101");
  backend_->refresh();
  EXPECT_EQ(backend_->poll("w2").state, ProcessState::kRunning);
  EXPECT_EQ(backend_->poll("w1").state, ProcessState::kExited);
  EXPECT_EQ(backend_->poll("w1").outcome, WorkerStatus::kStopped);
}

TEST_F(SlurmBackendTest, MpiPreflightMapsHostsToTheJobsRunningThere) {
  ASSERT_TRUE(backend_->launch({spec("w1"), spec("w2")}).is_ok());
  fake_->nodes["n1"] = {"10.0.0.2", {"ALLOCATED"}};
  fake_->nodes["n2"] = {"10.0.0.3", {"ALLOCATED"}};
  set_job("100", "RUNNING", "None", "n1");
  // w2 still pending: its host cannot be reached yet, and the error says so.
  auto p = backend_->preflight_mpi({{"10.0.0.2", "10.0.0.3"}, 2222, "python3"});
  ASSERT_FALSE(p.is_ok());
  EXPECT_NE(p.status().message().find("10.0.0.3"), std::string::npos) << p.status().message();
  set_job("101", "RUNNING", "None", "n2");
  p = backend_->preflight_mpi({{"10.0.0.2", "10.0.0.3"}, 2222, "python3"});
  ASSERT_TRUE(p.is_ok()) << p.status().message();
  const std::string agent = p.value().rsh_agent;
  ASSERT_NE(agent.find("muster-slurm-rsh "), std::string::npos) << agent;
  std::ifstream map(agent.substr(agent.find(' ') + 1));
  std::string text((std::istreambuf_iterator<char>(map)), std::istreambuf_iterator<char>());
  EXPECT_EQ(text, "10.0.0.2 100 n1\n10.0.0.3 101 n2\n");
  EXPECT_FALSE(backend_->preflight_mpi({{"10.9.9.9"}, 2222, "python3"}).is_ok());
}

TEST_F(SlurmBackendTest, ACorruptJobListIsRefusedNamingTheFile) {
  backend_.reset();
  std::ofstream(dir_ / "slurm" / "jobs.json") << "{not json";
  auto opts = slurm::SlurmOptions::from_map(dir_, {{"master_address", "10.0.0.1"}});
  auto b = slurm::SlurmBackend::create(opts.value(), std::make_unique<FakeSlurm>(fake_));
  ASSERT_FALSE(b.is_ok());
  EXPECT_NE(b.status().message().find("jobs.json"), std::string::npos);
}

// The registry keeps a queued worker `scheduling` with Slurm's reason, and
// counts the startup timeout only from the job's start.
class FixedClock final : public muster::service::Clock {
 public:
  muster::service::TimePoint now() const override { return t; }
  muster::service::WallTime wall() const override { return std::chrono::system_clock::now(); }
  muster::service::TimePoint t = std::chrono::steady_clock::now();
};

TEST_F(SlurmBackendTest, RegistryShowsQueuedWorkersAsSchedulingWithTheReason) {
  muster::service::RegistryOptions o;
  o.state_dir = dir_;
  o.project_dir = dir_;
  o.agent_path = "/bin/muster-agent";
  o.daemon_port = 9;
  o.startup_timeout = 10s;
  o.async_backend = false;
  FixedClock clock;
  muster::service::WorkerRegistry registry(o, *backend_, nullptr, clock);
  muster::service::LaunchBatch b;
  b.request.n = 1;
  b.request.code = "print(1)";
  auto launched = registry.launch(b);
  ASSERT_TRUE(launched.is_ok()) << launched.status().message();
  const std::string id = launched.value()[0].id;
  EXPECT_EQ(launched.value()[0].status, WorkerStatus::kScheduling);
  set_job(backend_->job_of(id), "PENDING", "Resources", "");
  backend_->refresh();
  clock.t += 60s;  // far past the startup timeout: a queued job does not time out
  registry.tick();
  auto w = registry.get(id);
  EXPECT_EQ(w.value().status, WorkerStatus::kScheduling);
  EXPECT_NE(w.value().reason.find("Resources"), std::string::npos) << w.value().reason;
  set_job(backend_->job_of(id), "RUNNING");
  backend_->refresh();
  registry.tick();
  EXPECT_EQ(registry.get(id).value().status, WorkerStatus::kStarting);
  clock.t += 5s;
  registry.tick();
  EXPECT_EQ(registry.get(id).value().status, WorkerStatus::kStarting);  // 5 s into its 10
  set_job(backend_->job_of(id), "CANCELLED");
  backend_->refresh();
  registry.tick();
  w = registry.get(id);
  EXPECT_EQ(w.value().status, WorkerStatus::kStopped);
  EXPECT_NE(w.value().reason.find("scancel"), std::string::npos) << w.value().reason;
}

TEST_F(SlurmBackendTest, AnAgentCallingInBeforeThePollerSawItsJobStartIsRunning) {
  muster::service::RegistryOptions o;
  o.state_dir = dir_;
  o.project_dir = dir_;
  o.agent_path = "/bin/muster-agent";
  o.daemon_port = 9;
  o.async_backend = false;
  FixedClock clock;
  muster::service::WorkerRegistry registry(o, *backend_, nullptr, clock);
  muster::service::LaunchBatch b;
  b.request.n = 1;
  b.request.code = "print(1)";
  const std::string id = registry.launch(b).value()[0].id;
  ASSERT_EQ(registry.get(id).value().status, WorkerStatus::kScheduling);
  ASSERT_TRUE(registry.agent_register(id, "10.0.0.2", std::nullopt).is_ok());
  EXPECT_EQ(registry.get(id).value().status, WorkerStatus::kRunning);
  EXPECT_EQ(registry.get(id).value().ip_address, "10.0.0.2");
}

}  // namespace
