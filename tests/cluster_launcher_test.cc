// The real launcher (Boost.Process, own process group): exit codes, logs,
// and terminate() ending the whole tree, including children that put
// themselves in other process groups the way mpirun's ranks can.
#include "service/cluster/launcher.h"
#include "service/cluster/launcher_keeper.h"

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include <gtest/gtest.h>

namespace muster::service {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

bool alive(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  if (text.empty()) return false;
  auto close = text.rfind(')');
  return close != std::string::npos && text.size() > close + 2 && text[close + 2] != 'Z';
}

class LauncherTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("muster_launcher_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override {
    for (pid_t pid : pids_) ::kill(pid, SIGKILL);  // in case a check failed
    fs::remove_all(dir_);
  }
  std::optional<int> wait_exit(LauncherProcess& p, std::chrono::seconds limit) {
    auto deadline = std::chrono::steady_clock::now() + limit;
    while (std::chrono::steady_clock::now() < deadline) {
      if (auto code = p.poll()) return code;
      std::this_thread::sleep_for(20ms);
    }
    return std::nullopt;
  }
  std::vector<pid_t> read_pids(const fs::path& file, size_t n) {
    auto deadline = std::chrono::steady_clock::now() + 20s;
    std::vector<pid_t> out;
    while (std::chrono::steady_clock::now() < deadline) {
      out.clear();
      std::ifstream in(file);
      pid_t pid;
      while (in >> pid) out.push_back(pid);
      if (out.size() >= n) break;
      std::this_thread::sleep_for(20ms);
    }
    pids_.insert(pids_.end(), out.begin(), out.end());
    return out;
  }
  fs::path dir_;
  std::vector<pid_t> pids_;
};

// With tagged_output the log gets whole lines, each rank's tagged once,
// however the program wrote them (here: mpirun's chunk tags by hand, then
// the real mpirun in cluster_integration_test), and every last byte is in
// the log once poll() reports the exit.
TEST_F(LauncherTest, TaggedOutputIsWrittenAsWholeLines) {
  auto launcher = make_process_launcher({});
  LauncherSpec spec;
  spec.argv = {"bash", "-c",
               "printf '[1,1]<stdout>:rank'; sleep 0.2; printf '[1,0]<stdout>:rank 0 of 2\\n'; sleep 0.2; "
               "printf '[1,1]<stdout>: 1 of 2\\n[1,0]<stderr>:last words'; exit 3"};
  spec.working_dir = dir_;
  spec.log_path = dir_ / "launcher.log";
  spec.tagged_output = true;
  auto p = launcher->start(spec);
  ASSERT_TRUE(p.is_ok()) << p.status().message();
  EXPECT_EQ(wait_exit(*p.value(), 20s).value_or(-1), 3);
  std::ifstream log(spec.log_path);
  std::stringstream text;
  text << log.rdbuf();
  EXPECT_EQ(text.str(), "[1,0]<stdout>:rank 0 of 2\n[1,1]<stdout>:rank 1 of 2\n[1,0]<stderr>:last words\n");
}

TEST_F(LauncherTest, ReportsExitCodeAndWritesTheLog) {
  auto launcher = make_process_launcher({});
  LauncherSpec spec;
  spec.argv = {"bash", "-c", "echo out-$GREETING; echo err >&2; exit 7"};
  spec.env = {{"GREETING", "hi"}};
  spec.working_dir = dir_;
  spec.log_path = dir_ / "logs" / "launcher.log";
  auto p = launcher->start(spec);
  ASSERT_TRUE(p.is_ok()) << p.status().message();
  EXPECT_EQ(wait_exit(*p.value(), 20s).value_or(-1), 7);
  std::ifstream log(spec.log_path);
  std::stringstream text;
  text << log.rdbuf();
  EXPECT_NE(text.str().find("out-hi"), std::string::npos) << text.str();
  EXPECT_NE(text.str().find("err"), std::string::npos) << text.str();
}

TEST_F(LauncherTest, MissingProgramIsAnError) {
  auto launcher = make_process_launcher({});
  LauncherSpec spec;
  spec.argv = {"muster-no-such-program-xyz"};
  spec.working_dir = dir_;
  spec.log_path = dir_ / "l.log";
  auto p = launcher->start(spec);
  ASSERT_FALSE(p.is_ok());
  EXPECT_NE(p.status().message().find("not on the daemon's PATH"), std::string::npos);
}

TEST_F(LauncherTest, TerminateEndsTheWholeTreeEvenOtherProcessGroups) {
  auto launcher = make_process_launcher({});
  LauncherSpec spec;
  // Two children: one in the launcher's group, one that moves to its own
  // group (setsid), as an MPI daemon's ranks may; the launcher ignores TERM.
  const fs::path pids = dir_ / "pids";
  spec.argv = {"bash", "-c",
               "trap '' TERM; sleep 300 & echo $! >> " + pids.string() + "; setsid sleep 300 & echo $! >> " +
                   pids.string() + "; wait"};
  spec.working_dir = dir_;
  spec.log_path = dir_ / "l.log";
  auto p = launcher->start(spec);
  ASSERT_TRUE(p.is_ok()) << p.status().message();
  auto children = read_pids(pids, 2);
  ASSERT_EQ(children.size(), 2u);
  for (pid_t c : children) EXPECT_TRUE(alive(c)) << c;
  EXPECT_FALSE(p.value()->poll().has_value());
  auto start = std::chrono::steady_clock::now();
  p.value()->terminate(500ms);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 10s);
  EXPECT_EQ(p.value()->poll().value_or(-1), 128 + SIGKILL);
  auto deadline = std::chrono::steady_clock::now() + 5s;
  while ((alive(children[0]) || alive(children[1])) && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(20ms);
  }
  EXPECT_FALSE(alive(children[0]));
  EXPECT_FALSE(alive(children[1]));
}

// The job outlives the process object that started it once detached (the
// daemon going away), and a later one adopts it by the keeper's identity:
// its exit code comes from the keeper's exit file, its output all in the log.
TEST_F(LauncherTest, ADetachedJobRunsOnAndIsAdopted) {
  auto launcher = make_process_launcher({});
  LauncherSpec spec;
  spec.argv = {"bash", "-c", "for i in 1 2 3 4 5; do echo tick-$i; sleep 0.2; done; exit 5"};
  spec.working_dir = dir_;
  spec.log_path = dir_ / "launcher.log";
  auto p = launcher->start(spec);
  ASSERT_TRUE(p.is_ok()) << p.status().message();
  const base::ProcessId keeper = p.value()->identity();
  ASSERT_TRUE(keeper.valid());
  p.value()->detach();
  p.value().reset();  // the daemon's object is gone; the job is not
  EXPECT_TRUE(alive(keeper.pid));
  auto adopted = launcher->adopt(keeper, dir_ / "launcher.exit");
  ASSERT_TRUE(adopted);
  EXPECT_EQ(wait_exit(*adopted, 20s).value_or(-1), 5);
  std::ifstream log(spec.log_path);
  std::stringstream text;
  text << log.rdbuf();
  EXPECT_EQ(text.str(), "tick-1\ntick-2\ntick-3\ntick-4\ntick-5\n");
  // A keeper that is gone and left an exit file is still adopted (it ended
  // while no daemon ran); one that left none is not.
  EXPECT_TRUE(launcher->adopt(keeper, dir_ / "launcher.exit"));
  EXPECT_FALSE(launcher->adopt(keeper, dir_ / "no-such.exit"));
}

// Terminating an adopted job ends its whole session by identity.
TEST_F(LauncherTest, AnAdoptedJobIsTerminatedByIdentity) {
  auto launcher = make_process_launcher({});
  LauncherSpec spec;
  const fs::path pids = dir_ / "pids";
  spec.argv = {"bash", "-c", "sleep 300 & echo $! >> " + pids.string() + "; wait"};
  spec.working_dir = dir_;
  spec.log_path = dir_ / "l.log";
  auto p = launcher->start(spec);
  ASSERT_TRUE(p.is_ok()) << p.status().message();
  auto children = read_pids(pids, 1);
  ASSERT_EQ(children.size(), 1u);
  const base::ProcessId keeper = p.value()->identity();
  p.value()->detach();
  p.value().reset();
  auto adopted = launcher->adopt(keeper, dir_ / "launcher.exit");
  ASSERT_TRUE(adopted);
  EXPECT_FALSE(adopted->poll().has_value());
  adopted->terminate(500ms);
  EXPECT_TRUE(adopted->poll().has_value());
  auto deadline = std::chrono::steady_clock::now() + 5s;
  while (alive(children[0]) && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(20ms);
  EXPECT_FALSE(alive(children[0]));
}

// The keeper's command line: every flag back as given, errors naming the flag.
TEST(KeeperArgv, RoundTripsAndNamesBadFlags) {
  KeeperOptions o;
  o.log = "/tmp/x/launcher.log";
  o.limits.max_bytes = 1 << 20;
  o.limits.keep = 2;
  o.exit_file = "/tmp/x/launcher.exit";
  o.tagged = true;
  o.argv = {"mpirun", "-np", "2", "--", "python3"};
  auto back = parse_keeper_argv(to_keeper_argv("/bin/muster-launcher", o));
  ASSERT_TRUE(back.is_ok()) << back.status().message();
  EXPECT_EQ(back->log, o.log);
  EXPECT_EQ(back->limits.max_bytes, o.limits.max_bytes);
  EXPECT_EQ(back->limits.keep, 2u);
  EXPECT_EQ(back->exit_file, o.exit_file);
  EXPECT_TRUE(back->tagged);
  EXPECT_EQ(back->argv, o.argv);
  auto bad = parse_keeper_argv({"k", "--log", "rel.log", "--exit-file", "/e", "--", "true"});
  ASSERT_FALSE(bad.is_ok());
  EXPECT_EQ(bad.status().field(), "--log");
  bad = parse_keeper_argv({"k", "--log", "/l", "--exit-file", "/e", "--keep", "x1", "--", "true"});
  ASSERT_FALSE(bad.is_ok());
  EXPECT_EQ(bad.status().field(), "--keep");
  bad = parse_keeper_argv({"k", "--log", "/l", "--exit-file", "/e", "--"});
  ASSERT_FALSE(bad.is_ok());
  EXPECT_EQ(bad.status().field(), "--");
}

}  // namespace
}  // namespace muster::service
