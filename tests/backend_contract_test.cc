// The Backend contract (workers/backend.h), one typed suite that every
// backend passes:
//   Fake        tests/fake_backend.h, the reference the registry's tests use;
//   Kubernetes  the real backend over tests/fake_kubernetes_api.h (the API
//               server its unit test plays; pods start and end when the
//               test says, and the backend learns it by a list);
//   Slurm       the real backend over tests/fake_slurm.h (its unit test's
//               Slurm; jobs run and end when the test says, and the
//               backend learns it by a squeue);
//   Local       the real backend with real processes (/bin/sh in place of
//               muster-agent), so it runs as backend_contract_local_test
//               (label integration: unit tests never fork).
// The container and ssh backends meet the same promises elsewhere:
// container_backend_test and container_integration_test need root and
// network namespaces, ssh_backend_integration_test an sshd (their unit
// tests' fakes script exact commands rather than play a world a generic
// suite could drive).
//
// A new backend joins by adding a Kind to BackendKinds. A Kind owns the
// backend and the world it acts on, and says how a worker that runs until
// stopped, one that exits with a code and one that cannot start look to
// it; settle() lets the backend see what its world did since (the local
// backend sees it by itself); restart() is a daemon's restart (the backend
// goes, a new one comes over the same world).
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <functional>
#include <map>
#include <ostream>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tests/fake_backend.h"
#include "tests/fake_kubernetes_api.h"
#include "tests/fake_slurm.h"
#include "tests/temp_dir.h"
#include "workers/backend.h"
#include "workers/kubernetes/kubernetes_backend.h"
#include "workers/local/local_backend.h"
#include "workers/slurm/slurm_backend.h"

namespace muster::workers {

// ProcessState in gtest's messages.
void PrintTo(ProcessState s, std::ostream* os) {
  static const char* const kNames[] = {"pending", "running", "exited", "unknown", "lost"};
  *os << kNames[static_cast<int>(s)];
}

namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using nlohmann::json;

// ---- the backends

class FakeKind {
 public:
  static constexpr const char* kName = "Fake";
  FakeKind() : backend_(std::make_unique<muster::testing::FakeBackend>()) {}
  Backend& backend() { return *backend_; }
  LaunchSpec spec(const std::string& id, std::optional<int> exits_with) {
    exits_[id] = exits_with;
    LaunchSpec s;
    s.worker_id = id;
    s.agent_argv = {"/fake/muster-agent"};
    return s;
  }
  void unstartable(const LaunchSpec& s) { backend_->unstartable.insert(s.worker_id); }
  // The agents that exit do so now.
  void settle() {
    for (const auto& [id, code] : exits_) {
      if (code && backend_->poll(id).state == ProcessState::kRunning) backend_->set_exited(id, *code);
    }
  }
  void restart() {
    backend_->shutdown();
    backend_ = std::make_unique<muster::testing::FakeBackend>();
  }

 private:
  std::unique_ptr<muster::testing::FakeBackend> backend_;
  std::map<std::string, std::optional<int>> exits_;
};

class KubernetesKind {
 public:
  static constexpr const char* kName = "Kubernetes";
  KubernetesKind() { start(std::make_unique<muster::testing::FakeApi>()); }
  Backend& backend() { return *backend_; }
  LaunchSpec spec(const std::string& id, std::optional<int> exits_with) {
    exits_[id] = exits_with;
    LaunchSpec s;
    s.worker_id = id;
    s.cpu = 0.5;
    s.memory_gb = 1;
    s.agent_argv = {"/work/build/bin/muster-agent", "--code", "pass"};
    s.working_dir = dir_.path() / "workers" / id;
    s.log_path = s.working_dir / "output.log";
    fs::create_directories(s.working_dir);
    s.env = {{"MUSTER_WORKER_ID", id}, {"MUSTER_AGENT_TOKEN", "secret-" + id}};
    return s;
  }
  void unstartable(const LaunchSpec& s) {
    std::lock_guard<std::mutex> lock(api_->mu);
    api_->refuse_pods_of.insert(s.worker_id);
  }
  // The kubelet: every pod of ours runs on node n1, or has ended with its
  // agent's code; then the backend lists them (what its watch would say),
  // and the log of a pod that ended is followed to its end (what its log
  // thread does).
  void settle() {
    {
      std::lock_guard<std::mutex> lock(api_->mu);
      for (auto& [name, pod] : api_->pods) {
        const std::string id = pod.value("/metadata/labels/muster.io~1worker"_json_pointer, std::string());
        auto e = exits_.find(id);
        if (e == exits_.end()) continue;
        pod["spec"]["nodeName"] = "n1";
        if (!e->second) {
          pod["status"] = {{"phase", "Running"},
                           {"containerStatuses", {{{"name", "agent"}, {"state", {{"running", json::object()}}}}}}};
        } else {
          pod["status"] = {
              {"phase", *e->second == 0 ? "Succeeded" : "Failed"},
              {"containerStatuses",
               {{{"name", "agent"}, {"state", {{"terminated", {{"exitCode", *e->second}, {"reason", "Completed"}}}}}}}}};
        }
        pod["metadata"]["resourceVersion"] = std::to_string(++api_->rv);
      }
    }
    ASSERT_TRUE(backend_->relist().is_ok());
    for (const auto& [id, code] : exits_) {
      if (code) backend_->follow_log(id);
    }
  }
  // The API server (its pods) outlives the daemon.
  void restart() {
    backend_->shutdown();
    auto api = std::make_unique<muster::testing::FakeApi>();
    {
      std::lock_guard<std::mutex> lock(api_->mu);
      api->pods = api_->pods;
      api->rv = api_->rv;
    }
    backend_.reset();
    start(std::move(api));
  }

 private:
  void start(std::unique_ptr<muster::testing::FakeApi> api) {
    api_ = api.get();
    kubernetes::KubernetesOptions o;
    o.state_dir = dir_.path();
    o.namespace_name = "ml";
    o.image = "muster-agent:1";
    o.master_address = "10.0.0.1";
    o.daemon_id = "d1";
    o.start_threads = false;
    auto b = kubernetes::KubernetesBackend::create(o, std::move(api));
    ASSERT_TRUE(b.is_ok()) << b.status().message();
    backend_ = std::move(b).value();
  }

  muster::testing::TempDir dir_{"muster-backend-contract-k8s"};
  muster::testing::FakeApi* api_ = nullptr;
  std::unique_ptr<kubernetes::KubernetesBackend> backend_;
  std::map<std::string, std::optional<int>> exits_;
};

class SlurmKind {
 public:
  static constexpr const char* kName = "Slurm";
  SlurmKind() { start(); }
  Backend& backend() { return *backend_; }
  LaunchSpec spec(const std::string& id, std::optional<int> exits_with) {
    exits_[id] = exits_with;
    LaunchSpec s;
    s.worker_id = id;
    s.agent_argv = {"/opt/muster/muster-agent", "--code", "pass"};
    s.working_dir = dir_.path() / "workers" / id;
    s.log_path = s.working_dir / "output.log";
    fs::create_directories(s.working_dir);
    s.env = {{"MUSTER_WORKER_ID", id}};
    return s;
  }
  void unstartable(const LaunchSpec& s) {
    std::lock_guard<std::mutex> lock(slurm_->mu);
    slurm_->refuse_names.insert("muster-" + s.worker_id);
  }
  // Slurm: every job of ours not cancelled runs on n1, or has ended with
  // its agent's code; then the backend asks squeue.
  void settle() {
    std::map<std::string, std::optional<int>> jobs;
    for (const auto& [id, code] : exits_) {
      if (auto job = backend_->job_of(id); !job.empty()) jobs[job] = code;
    }
    {
      std::lock_guard<std::mutex> lock(slurm_->mu);
      for (const auto& [job, code] : jobs) {
        auto& info = slurm_->jobs[job];
        if (info.state == "CANCELLED") continue;
        info.nodes = "n1";
        info.reason = "None";
        info.state = !code ? "RUNNING" : *code == 0 ? "COMPLETED" : "FAILED";
        info.exit_code = code;
      }
    }
    backend_->refresh();
  }
  // Slurm (its jobs) outlives the daemon.
  void restart() {
    backend_.reset();
    start();
  }

 private:
  void start() {
    auto o = slurm::SlurmOptions::from_map(dir_.path(), {{"master_address", "10.0.0.1"}, {"poll_ms", "60000"}});
    ASSERT_TRUE(o.is_ok()) << o.status().message();
    auto b = slurm::SlurmBackend::create(o.value(), std::make_unique<muster::testing::FakeSlurm>(slurm_));
    ASSERT_TRUE(b.is_ok()) << b.status().message();
    backend_ = std::move(b).value();
  }

  muster::testing::TempDir dir_{"muster-backend-contract-slurm"};
  std::shared_ptr<muster::testing::FakeSlurm::Shared> slurm_ = std::make_shared<muster::testing::FakeSlurm::Shared>();
  std::unique_ptr<slurm::SlurmBackend> backend_;
  std::map<std::string, std::optional<int>> exits_;
};

class LocalKind {
 public:
  static constexpr const char* kName = "Local";
  // A trivial agent joins no cgroup; the process group is what stop() reaches.
  LocalKind() : backend_(make()) {}
  ~LocalKind() {
    for (const auto& id : ids_) (void)backend_->stop(id, 0ms);  // a worker a test left running
  }
  Backend& backend() { return *backend_; }
  LaunchSpec spec(const std::string& id, std::optional<int> exits_with) {
    ids_.insert(id);
    LaunchSpec s;
    s.worker_id = id;
    s.agent_argv = {"/bin/sh", "-c", exits_with ? "exit " + std::to_string(*exits_with) : "exec sleep 60"};
    s.working_dir = dir_.path();
    s.log_path = dir_.path() / (id + ".log");
    return s;
  }
  void unstartable(LaunchSpec& s) { s.agent_argv = {"/nonexistent/muster-agent"}; }
  void settle() {}
  // The agents outlive the daemon (stop_on_shutdown is off).
  void restart() {
    backend_->shutdown();
    backend_ = make();
  }

 private:
  static std::unique_ptr<local::LocalBackend> make() {
    local::LocalBackendOptions o;
    o.cgroups = false;
    return std::make_unique<local::LocalBackend>(o);
  }
  muster::testing::TempDir dir_{"muster-backend-contract-local"};
  std::unique_ptr<local::LocalBackend> backend_;
  std::set<std::string> ids_;
};

// ---- the suite

bool started(const ProcessStatus& s) { return s.state == ProcessState::kRunning; }
bool not_running(const ProcessStatus& s) {
  return s.state != ProcessState::kRunning && s.state != ProcessState::kPending;
}
bool ended(const ProcessStatus& s) { return s.state == ProcessState::kExited; }
bool unknown(const ProcessStatus& s) { return s.state == ProcessState::kUnknown; }

template <class Kind>
class BackendContract : public ::testing::Test {
 protected:
  Backend& backend() { return kind_.backend(); }
  LaunchSpec runs(const std::string& id) { return kind_.spec(id, std::nullopt); }
  LaunchSpec exits(const std::string& id, int code) { return kind_.spec(id, code); }

  // poll(id) once `want` holds, or the last answer after 20 s (the local
  // backend's processes take their time; the others answer at once).
  ProcessStatus await(const std::string& id, const std::function<bool(const ProcessStatus&)>& want) {
    const auto deadline = std::chrono::steady_clock::now() + 20s;
    for (;;) {
      kind_.settle();
      ProcessStatus s = backend().poll(id);
      if (want(s) || std::chrono::steady_clock::now() >= deadline) return s;
      std::this_thread::sleep_for(10ms);
    }
  }

  Kind kind_;
};

struct KindNames {
  template <class T>
  static std::string GetName(int) {
    return T::kName;
  }
};
using BackendKinds = ::testing::Types<FakeKind, KubernetesKind, SlurmKind, LocalKind>;
TYPED_TEST_SUITE(BackendContract, BackendKinds, KindNames);

// launch() starts every worker of the batch; poll() says so (a queueing
// backend says pending until its scheduler starts them).
TYPED_TEST(BackendContract, LaunchStartsEveryWorkerOfTheBatch) {
  ASSERT_TRUE(this->backend().launch({this->runs("a"), this->runs("b"), this->runs("c")}).is_ok());
  for (const char* id : {"a", "b", "c"}) {
    const auto first = this->backend().poll(id);
    EXPECT_TRUE(first.state == ProcessState::kRunning || first.state == ProcessState::kPending)
        << id << ": " << ::testing::PrintToString(first.state);
    EXPECT_EQ(this->await(id, started).state, ProcessState::kRunning) << id;
  }
}

// launch() is all-or-nothing: a worker that cannot start fails the batch,
// the error names it, and no worker of the batch is left running.
TYPED_TEST(BackendContract, LaunchIsAllOrNothing) {
  LaunchSpec bad = this->runs("w-cannot-start");
  this->kind_.unstartable(bad);
  const auto s = this->backend().launch({this->runs("before"), bad, this->runs("after")});
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("w-cannot-start"), std::string::npos) << s.message();
  for (const char* id : {"before", "w-cannot-start", "after"}) {
    const auto st = this->await(id, not_running);
    EXPECT_TRUE(not_running(st)) << id << " is " << ::testing::PrintToString(st.state) << " after a failed launch";
  }
}

// poll() of a worker the backend never saw: unknown; it has no identity.
TYPED_TEST(BackendContract, AnUnknownWorkerIsUnknown) {
  EXPECT_EQ(this->backend().poll("never-launched").state, ProcessState::kUnknown);
  EXPECT_EQ(this->backend().process_identity("never-launched"), "");
}

// poll(): a worker whose agent exited is exited, with its exit code.
TYPED_TEST(BackendContract, PollReportsTheExitCode) {
  ASSERT_TRUE(this->backend().launch({this->exits("zero", 0), this->exits("three", 3)}).is_ok());
  const auto zero = this->await("zero", ended);
  ASSERT_EQ(zero.state, ProcessState::kExited);
  EXPECT_EQ(zero.exit_code, 0);
  const auto three = this->await("three", ended);
  ASSERT_EQ(three.state, ProcessState::kExited);
  EXPECT_EQ(three.exit_code, 3);
}

// stop() returns once the tree is signalled, not after the grace; the
// worker then ends (with its code, or the end the backend decided).
TYPED_TEST(BackendContract, StopReturnsBeforeTheGraceAndTheWorkerEnds) {
  ASSERT_TRUE(this->backend().launch({this->runs("s"), this->runs("other")}).is_ok());
  ASSERT_TRUE(started(this->await("s", started)));
  const auto t0 = std::chrono::steady_clock::now();
  ASSERT_TRUE(this->backend().stop("s", 30s).is_ok());
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 5s) << "stop() held its caller for the grace";
  const auto st = this->await("s", ended);
  EXPECT_EQ(st.state, ProcessState::kExited);
  EXPECT_TRUE(st.exit_code || st.outcome) << "exited, but neither an exit code nor an outcome";
  EXPECT_EQ(this->await("other", started).state, ProcessState::kRunning) << "stop() reached another worker";
}

// stop() is idempotent, and an unknown id is not an error.
TYPED_TEST(BackendContract, StopIsIdempotentAndUnknownIdsAreNotAnError) {
  ASSERT_TRUE(this->backend().launch({this->runs("twice")}).is_ok());
  ASSERT_TRUE(started(this->await("twice", started)));
  EXPECT_TRUE(this->backend().stop("twice", 0ms).is_ok());
  EXPECT_TRUE(this->backend().stop("twice", 0ms).is_ok());
  EXPECT_EQ(this->await("twice", ended).state, ProcessState::kExited);
  EXPECT_TRUE(this->backend().stop("twice", 0ms).is_ok()) << "stop() of a worker that ended";
  EXPECT_TRUE(this->backend().stop("never-launched", 0ms).is_ok());
}

// process_identity() is what a restarted daemon hands to adopt() (a
// backend with a ledger of its own, Slurm's jobs.json, says "" and finds
// its workers itself): poll() and stop() then reach the same worker again.
TYPED_TEST(BackendContract, ARestartedDaemonReachesItsWorkersAgain) {
  ASSERT_TRUE(this->backend().launch({this->runs("kept")}).is_ok());
  ASSERT_TRUE(started(this->await("kept", started)));
  const std::string identity = this->backend().process_identity("kept");
  this->kind_.restart();
  if (!identity.empty()) {
    this->backend().adopt("kept", identity);
  } else if (this->backend().poll("kept").state == ProcessState::kUnknown) {
    GTEST_SKIP() << TypeParam::kName << " keeps nothing of a worker across a restart";
  }
  EXPECT_EQ(this->await("kept", started).state, ProcessState::kRunning);
  EXPECT_EQ(this->backend().process_identity("kept"), identity);
  ASSERT_TRUE(this->backend().stop("kept", 0ms).is_ok());
  EXPECT_EQ(this->await("kept", ended).state, ProcessState::kExited) << "stop() did not reach the adopted worker";
}

// forget(): the backend drops the worker.
TYPED_TEST(BackendContract, AForgottenWorkerIsUnknown) {
  ASSERT_TRUE(this->backend().launch({this->exits("done", 0)}).is_ok());
  ASSERT_TRUE(ended(this->await("done", ended)));
  this->backend().forget("done");
  EXPECT_EQ(this->await("done", unknown).state, ProcessState::kUnknown);
  this->backend().forget("never-launched");
}

// log_complete(): once a worker ended, its log is complete in the end (the
// registry holds the worker's exit until then, or its log_drain_timeout).
TYPED_TEST(BackendContract, AnEndedWorkersLogIsCompleteInTheEnd) {
  ASSERT_TRUE(this->backend().launch({this->exits("logged", 0)}).is_ok());
  ASSERT_TRUE(ended(this->await("logged", ended)));
  const auto deadline = std::chrono::steady_clock::now() + 20s;
  while (!this->backend().log_complete("logged") && std::chrono::steady_clock::now() < deadline) {
    this->kind_.settle();
    std::this_thread::sleep_for(10ms);
  }
  EXPECT_TRUE(this->backend().log_complete("logged"));
}

// Every method may be called from any thread.
TYPED_TEST(BackendContract, MethodsMayBeCalledFromManyThreadsAtOnce) {
  constexpr int kThreads = 4;
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    const std::string a = "t" + std::to_string(t) + "a", b = "t" + std::to_string(t) + "b";
    std::vector<LaunchSpec> batch = {this->runs(a), this->runs(b)};
    threads.emplace_back([this, &failures, a, b, batch] {
      if (!this->backend().launch(batch).is_ok()) ++failures;
      for (int i = 0; i < 20; ++i) {
        (void)this->backend().poll(a);
        (void)this->backend().process_identity(b);
        (void)this->backend().poll("t0a");
      }
      if (!this->backend().stop(b, 0ms).is_ok()) ++failures;
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(failures.load(), 0);
  for (int t = 0; t < kThreads; ++t) {
    EXPECT_EQ(this->await("t" + std::to_string(t) + "a", started).state, ProcessState::kRunning) << t;
    EXPECT_EQ(this->await("t" + std::to_string(t) + "b", ended).state, ProcessState::kExited) << t;
  }
}

// shutdown() returns with workers running (the daemon is going away).
TYPED_TEST(BackendContract, ShutdownReturnsWithWorkersRunning) {
  ASSERT_TRUE(this->backend().launch({this->runs("left")}).is_ok());
  ASSERT_TRUE(started(this->await("left", started)));
  const auto t0 = std::chrono::steady_clock::now();
  this->backend().shutdown();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 10s);
}

}  // namespace
}  // namespace muster::workers
