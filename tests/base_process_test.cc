// base::spawn and friends with real processes: the child starts clean (no
// blocked or ignored signals, no inherited descriptors), its identity is
// {pid, start time}, and a stale identity never signals anything.
#include "api/base/process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include <gtest/gtest.h>

namespace muster::base {
namespace {
namespace fs = std::filesystem;
using namespace std::chrono_literals;

std::string status_field(pid_t pid, const std::string& name) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(name + ":", 0) == 0) {
      auto v = line.substr(name.size() + 1);
      return v.substr(v.find_first_not_of(" \t"));
    }
  }
  return "";
}

std::vector<int> open_fds(pid_t pid) {
  std::vector<int> out;
  for (const auto& e : fs::directory_iterator("/proc/" + std::to_string(pid) + "/fd")) {
    out.push_back(std::stoi(e.path().filename().string()));
  }
  std::sort(out.begin(), out.end());
  return out;
}

// Waits for `pid` (our child) to end; its exit code, or nullopt after 5 s.
std::optional<int> reap_within(pid_t pid, std::chrono::milliseconds limit = 5s) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < deadline) {
    if (auto code = try_reap(pid)) return code;
    std::this_thread::sleep_for(10ms);
  }
  return std::nullopt;
}

// The parent blocks SIGTERM, ignores SIGUSR1 and holds a socket without
// CLOEXEC, as a daemon does; both spawn paths must hand the child none of it.
class ProcessTest : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &set, &old_mask_);
    old_usr1_ = ::signal(SIGUSR1, SIG_IGN);
    socket_ = ::socket(AF_INET, SOCK_STREAM, 0);  // no SOCK_CLOEXEC on purpose
  }
  void TearDown() override {
    ::close(socket_);
    ::signal(SIGUSR1, old_usr1_);
    pthread_sigmask(SIG_SETMASK, &old_mask_, nullptr);
  }
  SpawnOptions sleeper() const {
    SpawnOptions o;
    o.argv = {"sleep", "30"};
    if (GetParam()) o.child_setup = [] { return 0; };  // the fork + exec path
    return o;
  }
  sigset_t old_mask_;
  sighandler_t old_usr1_;
  int socket_ = -1;
};

TEST_P(ProcessTest, TheChildStartsCleanInItsOwnSession) {
  auto s = spawn(sleeper());
  ASSERT_FALSE(s.failure) << *s.failure;
  ASSERT_TRUE(s.id.valid());
  std::this_thread::sleep_for(100ms);  // exec done
  EXPECT_EQ(status_field(s.id.pid, "SigBlk"), "0000000000000000");
  // glibc's posix_spawn helper leaves its two internal signals (32, 33) set
  // to SIG_IGN; every signal a program can name must be at its default.
  const unsigned long long ignored = std::stoull(status_field(s.id.pid, "SigIgn"), nullptr, 16);
  EXPECT_EQ(ignored & ~((1ull << 31) | (1ull << 32)), 0u) << std::hex << ignored;
  EXPECT_EQ(open_fds(s.id.pid), (std::vector<int>{0, 1, 2}));
  auto st = read_proc_stat(s.id.pid);
  ASSERT_TRUE(st);
  EXPECT_EQ(st->pgrp, s.id.pid);
  EXPECT_EQ(st->session, s.id.pid);
  EXPECT_TRUE(alive(s.id));
  EXPECT_TRUE(group_alive(s.id.pid));
  EXPECT_TRUE(signal_group(s.id, SIGTERM));
  EXPECT_EQ(reap_within(s.id.pid), 128 + SIGTERM);
  EXPECT_FALSE(alive(s.id));
}

INSTANTIATE_TEST_SUITE_P(SpawnPaths, ProcessTest, ::testing::Values(false, true),
                         [](const auto& info) { return info.param ? "ForkExec" : "PosixSpawn"; });

TEST(ProcessIdTest, StartTimeIsField22AndRoundTrips) {
  auto me = identify(::getpid());
  ASSERT_TRUE(me);
  EXPECT_GT(me->start_time, 0u);
  EXPECT_EQ(ProcessId::parse(me->to_string()), me);
  EXPECT_FALSE(ProcessId::parse("12"));
  EXPECT_FALSE(ProcessId::parse("12:0"));
  EXPECT_FALSE(ProcessId::parse("-3:5"));
  EXPECT_FALSE(ProcessId::parse("12:5x"));
}

TEST(ProcessIdTest, AStaleIdentityNeverSignals) {
  SpawnOptions o;
  o.argv = {"sleep", "30"};
  auto s = spawn(o);
  ASSERT_FALSE(s.failure);
  // The same pid with another start time: what a reused pid looks like.
  const ProcessId stale{s.id.pid, s.id.start_time - 1};
  EXPECT_FALSE(alive(stale));
  EXPECT_FALSE(signal_process(stale, SIGKILL));
  EXPECT_FALSE(signal_group(stale, SIGKILL));
  std::this_thread::sleep_for(50ms);
  EXPECT_TRUE(alive(s.id)) << "a stale identity killed the process";
  EXPECT_TRUE(signal_process(s.id, SIGKILL));
  EXPECT_EQ(reap_within(s.id.pid), 128 + SIGKILL);
  // Reaped: the pid is free; nothing is signalled through the old identity.
  EXPECT_FALSE(signal_process(s.id, SIGKILL));
}

TEST(ProcessTest2, TheGroupIsReachedAfterItsLeaderIsGone) {
  SpawnOptions o;
  o.argv = {"/bin/sh", "-c", "sleep 30 & echo $! ; wait"};
  const fs::path out = fs::temp_directory_path() / ("muster-harden-group-" + std::to_string(::getpid()));
  o.output = out;
  auto s = spawn(o);
  ASSERT_FALSE(s.failure);
  pid_t member = 0;
  for (int i = 0; i < 200 && member == 0; ++i) {
    std::ifstream in(out);
    in >> member;
    std::this_thread::sleep_for(10ms);
  }
  ASSERT_GT(member, 0);
  auto member_id = identify(member);
  ASSERT_TRUE(member_id);
  EXPECT_EQ(descendants(s.id), std::vector<ProcessId>{*member_id});
  ASSERT_TRUE(signal_process(s.id, SIGKILL));
  EXPECT_EQ(reap_within(s.id.pid), 128 + SIGKILL);
  EXPECT_TRUE(group_alive(s.id.pid)) << "the member should outlive its leader";
  EXPECT_TRUE(signal_group(s.id, SIGKILL));
  for (int i = 0; i < 200 && group_alive(s.id.pid); ++i) std::this_thread::sleep_for(10ms);
  EXPECT_FALSE(group_alive(s.id.pid));
  fs::remove(out);
}

// mpirun puts each rank in a process group of its own, in mpirun's session:
// the session reaches them even after their leader is gone.
TEST(ProcessTest2, TheSessionReachesMembersInOtherGroups) {
  SpawnOptions o;
  o.argv = {"/bin/sh", "-c", "perl -e 'setpgrp(0,0); sleep 30' & sleep 30 & wait"};
  auto s = spawn(o);
  ASSERT_FALSE(s.failure);
  std::vector<ProcessId> members;
  for (int i = 0; i < 300 && members.size() < 3; ++i) {
    std::this_thread::sleep_for(10ms);
    members = session_members(s.id);
  }
  ASSERT_EQ(members.size(), 3u);  // sh, perl (its own group), sleep
  const ProcessId stale{s.id.pid, s.id.start_time + 1};
  EXPECT_TRUE(session_members(stale).empty());
  ASSERT_TRUE(signal_process(s.id, SIGKILL));  // the leader goes first
  EXPECT_EQ(reap_within(s.id.pid), 128 + SIGKILL);
  EXPECT_EQ(signal_session(s.id, SIGKILL), 2);
  for (int i = 0; i < 300 && !session_members(s.id).empty(); ++i) std::this_thread::sleep_for(10ms);
  EXPECT_TRUE(session_members(s.id).empty());
}

}  // namespace
}  // namespace muster::base
