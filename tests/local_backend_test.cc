// LocalBackend with real processes (label integration): output to the log,
// exit codes by poll, all-or-nothing launch, and stop ending a whole tree.
#include "workers/local/local_backend.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>

#include <filesystem>
#include <fstream>
#include <thread>

#include "api/base/process.h"

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using muster::workers::LaunchSpec;
using muster::workers::ProcessState;
using muster::workers::local::LocalBackend;

namespace {

class LocalBackendTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/muster-local-XXXXXX";
    dir_ = mkdtemp(tmpl);
  }
  void TearDown() override {
    for (const auto& id : ids_) (void)backend_.stop(id, 0ms);
    fs::remove_all(dir_);
  }
  LaunchSpec spec(const std::string& id, const std::string& shell) {
    ids_.push_back(id);
    LaunchSpec s;
    s.worker_id = id;
    s.agent_argv = {"/bin/sh", "-c", shell};
    s.env = {{"GREETING", "hello"}};
    s.working_dir = dir_;
    s.log_path = dir_ / (id + ".log");
    return s;
  }
  muster::workers::ProcessStatus wait_exit(const std::string& id) {
    const auto deadline = std::chrono::steady_clock::now() + 20s;
    auto st = backend_.poll(id);
    while (st.state == ProcessState::kRunning && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(20ms);
      st = backend_.poll(id);
    }
    return st;
  }
  std::string read(const fs::path& p) {
    std::ifstream in(p);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }

  fs::path dir_;
  std::vector<std::string> ids_;
  LocalBackend backend_;
};

TEST_F(LocalBackendTest, OutputEnvCwdAndExitCodes) {
  ASSERT_TRUE(backend_.launch({spec("a", "echo $GREETING from $(pwd); echo err >&2; exit 5"),
                               spec("b", "kill -TERM $$")})
                  .is_ok());
  auto a = wait_exit("a");
  EXPECT_EQ(a.state, ProcessState::kExited);
  EXPECT_EQ(a.exit_code, 5);
  EXPECT_EQ(read(dir_ / "a.log"), "hello from " + fs::canonical(dir_).string() + "\nerr\n");
  EXPECT_EQ(wait_exit("b").exit_code, 128 + SIGTERM);
  EXPECT_EQ(backend_.poll("never").state, ProcessState::kUnknown);
  EXPECT_TRUE(backend_.stop("never", 0ms).is_ok());
}

TEST_F(LocalBackendTest, LaunchIsAllOrNothing) {
  auto good = spec("good", "echo $$ > good.pid; exec sleep 60");
  auto bad = spec("bad", "");
  bad.agent_argv = {"/nonexistent/muster-agent"};
  auto s = backend_.launch({good, bad});
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("bad"), std::string::npos) << s.message();
  // The rollback's stop returns once the tree is signalled; it ends soon after.
  EXPECT_EQ(wait_exit("good").state, ProcessState::kExited);
}

TEST_F(LocalBackendTest, StopKillsTheTreeEvenWhenTermIsIgnored) {
  // The leader ignores SIGTERM and has a background grandchild.
  ASSERT_TRUE(backend_.launch({spec("t", "trap '' TERM; sleep 300 & echo $! > grandchild.pid; wait")}).is_ok());
  const auto pid_file = dir_ / "grandchild.pid";
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (read(pid_file).empty() && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(20ms);
  const int grandchild = std::stoi(read(pid_file));
  ASSERT_EQ(::kill(grandchild, 0), 0);
  const auto start = std::chrono::steady_clock::now();
  ASSERT_TRUE(backend_.stop("t", 300ms).is_ok());
  EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);
  // stop() returns once signalled; SIGKILL follows the grace on the reaper thread.
  EXPECT_EQ(wait_exit("t").state, ProcessState::kExited);
  const auto gone = std::chrono::steady_clock::now() + 10s;
  while (::kill(grandchild, 0) == 0 && std::chrono::steady_clock::now() < gone) {
    std::ifstream st("/proc/" + std::to_string(grandchild) + "/stat");
    std::string l;
    if (std::getline(st, l) && l[l.rfind(')') + 2] == 'Z') break;
    std::this_thread::sleep_for(20ms);
  }
  // Gone (or a zombie waiting for PID 1).
  std::ifstream stat("/proc/" + std::to_string(grandchild) + "/stat");
  std::string line;
  if (std::getline(stat, line)) {
    EXPECT_EQ(line[line.rfind(')') + 2], 'Z') << line;
  }
}

// The identity persisted with a worker ("<pid>:<start time>") is what a
// restarted daemon adopts; stop() and poll() then reach the same process,
// and only it: the same pid with another start time is a process that
// reused the number, and is never signalled (nor is its group).
TEST_F(LocalBackendTest, AnAdoptedWorkerIsReachedByItsIdentityAndAReusedPidNeverIs) {
  muster::base::SpawnOptions o;
  o.argv = {"sleep", "60"};
  auto victim = muster::base::spawn(o);
  ASSERT_FALSE(victim.failure);
  auto adopted = muster::base::spawn(o);
  ASSERT_FALSE(adopted.failure);

  const muster::base::ProcessId reused{victim.id.pid, victim.id.start_time + 1};
  backend_.adopt("ghost", reused.to_string());
  backend_.adopt("old", adopted.id.to_string());
  EXPECT_EQ(backend_.poll("ghost").state, ProcessState::kExited);
  EXPECT_EQ(backend_.poll("old").state, ProcessState::kRunning);
  EXPECT_EQ(backend_.process_identity("old"), adopted.id.to_string());

  EXPECT_TRUE(backend_.stop("ghost", 100ms).is_ok());
  std::this_thread::sleep_for(100ms);
  EXPECT_TRUE(muster::base::alive(victim.id)) << "stop() signalled a reused process group";

  EXPECT_TRUE(backend_.stop("old", 2s).is_ok());
  EXPECT_EQ(muster::base::wait_exit(adopted.id.pid), 128 + SIGTERM);
  EXPECT_EQ(wait_exit("old").state, ProcessState::kExited);  // the reaper hears of it through the pidfd

  ASSERT_TRUE(muster::base::signal_process(victim.id, SIGKILL));
  muster::base::wait_exit(victim.id.pid);
}

// CPU time of this process (the backend's reaper thread is one of its threads).
double cpu_seconds() {
  rusage u{};
  ::getrusage(RUSAGE_SELF, &u);
  return u.ru_utime.tv_sec + u.ru_stime.tv_sec + (u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

// A stopped worker's SIGKILL deadline outlives its tree when the tree ends
// within the grace; the reaper once kept waking for that past deadline and
// spun a core until the registry forgot the worker. Idle workers beside it
// cost the reaper nothing either: it waits on their pidfds.
TEST_F(LocalBackendTest, TheReaperIdlesWhenStoppedAndRunningWorkersWait) {
  std::vector<LaunchSpec> specs;
  for (int i = 0; i < 32; ++i) specs.push_back(spec("idle" + std::to_string(i), "exec sleep 60"));
  specs.push_back(spec("stopped", "exec sleep 60"));
  ASSERT_TRUE(backend_.launch(specs).is_ok());
  ASSERT_TRUE(backend_.stop("stopped", 300ms).is_ok());
  EXPECT_EQ(wait_exit("stopped").exit_code, 128 + SIGTERM);
  std::this_thread::sleep_for(600ms);  // past the grace: the deadline is history
  EXPECT_EQ(backend_.poll("idle0").state, ProcessState::kRunning);
  const double before = cpu_seconds();
  std::this_thread::sleep_for(1s);
  const double used = cpu_seconds() - before;
  EXPECT_LT(used, 0.2) << "the backend used " << used << " s of CPU in 1 s with nothing to do";
}

TEST_F(LocalBackendTest, ALaunchedWorkersIdentityIsItsAgent) {
  ASSERT_TRUE(backend_.launch({spec("i", "exec sleep 60")}).is_ok());
  // "<pid>:<start time>", then "@<cgroup>" where the worker has one.
  const std::string identity = backend_.process_identity("i");
  auto id = muster::base::ProcessId::parse(identity.substr(0, identity.find('@')));
  ASSERT_TRUE(id);
  EXPECT_EQ(muster::base::identify(id->pid), id);
  auto st = muster::base::read_proc_stat(id->pid);
  ASSERT_TRUE(st);
  EXPECT_EQ(st->pgrp, id->pid);
  EXPECT_EQ(st->session, id->pid);
}

}  // namespace
