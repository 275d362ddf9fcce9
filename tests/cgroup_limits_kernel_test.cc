// api/base/cgroup_limits.h against this host's kernel (label integration):
// suite CgroupV1 in the cgroup v1 memory and cpu hierarchies, CgroupV2 in
// the v2 one; each test is skipped, saying why, where the host lacks its
// layout (ctest counts the skip as one: tests/workers.cmake). Each makes
// one cgroup directory of its own, named after the test's pid, and removes
// it, whatever the outcome.
#include "api/base/cgroup_limits.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <sstream>
#include <thread>

#include "api/base/process.h"

namespace muster::base {
namespace {

namespace fs = std::filesystem;

constexpr double kSmallGib = 64.0 / 1024;  // 64 MiB
// Past the limit: 256 MiB, every page touched (bytearray zero-fills).
const std::vector<std::string> kHog = {"/usr/bin/python3", "-c", "b = bytearray(256 << 20)"};

std::string read(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string name_for(const char* what) { return std::string("kernel-test-") + what + "-" + std::to_string(::getpid()); }

int wait_status(pid_t pid) {
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return status;
}

// CPU seconds (user + system) `pid` has used, from /proc/<pid>/stat.
double cpu_seconds(pid_t pid) {
  std::string stat = read("/proc/" + std::to_string(pid) + "/stat");
  std::istringstream rest(stat.substr(stat.rfind(')') + 2));
  std::string field;
  double utime = 0, stime = 0;
  for (int i = 3; i <= 15 && rest >> field; ++i) {
    if (i == 14) utime = std::stod(field);
    if (i == 15) stime = std::stod(field);
  }
  return (utime + stime) / static_cast<double>(::sysconf(_SC_CLK_TCK));
}

std::string why_no_v1(const CgroupMounts& mounts, const char* controller) {
  auto it = mounts.v1_own.find(controller);
  if (it == mounts.v1_own.end()) return std::string("no cgroup v1 ") + controller + " hierarchy is mounted on this host";
  if (::access(it->second.c_str(), W_OK) != 0) return "cannot write to " + it->second.string();
  return "";
}

TEST(CgroupV1, AnAllocationPastTheMemoryLimitIsKilledAndCountedAsOutOfMemory) {
  const auto mounts = CgroupMounts::of_this_process();
  if (auto why = why_no_v1(mounts, "memory"); !why.empty()) GTEST_SKIP() << why;
  auto limits = CgroupLimits::apply(mounts, Cgroup(), {name_for("oom"), 0, kSmallGib});
  ASSERT_EQ(limits.report().at("memory"), "enforced by cgroup v1");
  const fs::path dir = mounts.v1_own.at("memory") / ("muster-" + name_for("oom"));
  EXPECT_EQ(read(dir / "memory.limit_in_bytes"), "67108864\n");
  if (fs::exists(dir / "memory.memsw.limit_in_bytes")) {
    EXPECT_EQ(read(dir / "memory.memsw.limit_in_bytes"), "67108864\n");
  }
  EXPECT_FALSE(limits.out_of_memory());
  SpawnOptions o;
  o.argv = kHog;
  o.child_setup = [&limits] { return limits.join_child(); };
  auto hog = spawn(o);
  ASSERT_FALSE(hog.failure) << *hog.failure;
  const int status = wait_status(hog.id.pid);
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << "status " << status;
  EXPECT_TRUE(limits.out_of_memory());
  EXPECT_TRUE(limits.remove());
  EXPECT_FALSE(fs::exists(dir));
}

TEST(CgroupV1, ACpuQuotaHoldsASpinningProcessToItsShare) {
  const auto mounts = CgroupMounts::of_this_process();
  if (auto why = why_no_v1(mounts, "cpu"); !why.empty()) GTEST_SKIP() << why;
  auto limits = CgroupLimits::apply(mounts, Cgroup(), {name_for("cpu"), 0.2, 0});
  ASSERT_EQ(limits.report().at("cpu"), "enforced by cgroup v1");
  const fs::path dir = mounts.v1_own.at("cpu") / ("muster-" + name_for("cpu"));
  EXPECT_EQ(read(dir / "cpu.cfs_quota_us"), "20000\n");
  EXPECT_EQ(read(dir / "cpu.cfs_period_us"), "100000\n");
  SpawnOptions o;
  o.argv = {"/bin/sh", "-c", "while :; do :; done"};
  o.child_setup = [&limits] { return limits.join_child(); };
  auto spin = spawn(o);
  ASSERT_FALSE(spin.failure) << *spin.failure;
  const auto start = std::chrono::steady_clock::now();
  const double before = cpu_seconds(spin.id.pid);
  std::this_thread::sleep_for(std::chrono::seconds(2));
  const double used = cpu_seconds(spin.id.pid) - before;
  EXPECT_EQ(read(dir / "cgroup.procs"), std::to_string(spin.id.pid) + "\n");  // joined between fork and exec
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ::kill(spin.id.pid, SIGKILL);
  wait_status(spin.id.pid);
  const double cores = used / wall;
  std::printf("cpu=0.2 in cgroup v1: %.3f cores\n", cores);
  EXPECT_GT(cores, 0.1);
  EXPECT_LT(cores, 0.3);
  EXPECT_TRUE(limits.remove());
  EXPECT_FALSE(fs::exists(dir));
}

TEST(CgroupV2, AnAllocationPastMemoryMaxIsKilledAndCountedAsOutOfMemory) {
  const auto mounts = CgroupMounts::of_this_process();
  if (!mounts.v2_own) GTEST_SKIP() << "no cgroup v2 hierarchy is mounted on this host";
  CgroupMounts v2_only = mounts;
  v2_only.v1_own.clear();
  const auto probed = probe_limits(v2_only, *mounts.v2_own, {"probe", 0, kSmallGib});
  if (probed.at("memory") != "enforced by cgroup v2") {
    GTEST_SKIP() << "no cgroup v2 memory controller for a child of " << mounts.v2_own->string() << " on this host: "
                 << probed.at("memory").substr(std::string(kNotEnforced).size(),
                                               probed.at("memory").find("; no cgroup v1") - std::string(kNotEnforced).size());
  }
  const fs::path dir = *mounts.v2_own / ("muster-" + name_for("v2"));
  ASSERT_TRUE(fs::create_directory(dir) || fs::exists(dir));
  struct Cleanup {
    fs::path dir;
    ~Cleanup() { ::rmdir(dir.c_str()); }
  } cleanup{dir};
  auto limits = CgroupLimits::apply(mounts, Cgroup(dir), {name_for("v2"), 0, kSmallGib});
  ASSERT_EQ(limits.report().at("memory"), "enforced by cgroup v2");
  EXPECT_EQ(read(dir / "memory.max"), "67108864\n");
  // The worker's owner joins the v2 cgroup itself (the agent does, first thing).
  const int procs = ::open((dir / "cgroup.procs").c_str(), O_WRONLY | O_CLOEXEC);
  ASSERT_GE(procs, 0);
  SpawnOptions o;
  o.argv = kHog;
  o.child_setup = [procs] { return ::write(procs, "0", 1) == 1 ? 0 : 126; };
  auto hog = spawn(o);
  ::close(procs);
  ASSERT_FALSE(hog.failure) << *hog.failure;
  const int status = wait_status(hog.id.pid);
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << "status " << status;
  EXPECT_TRUE(limits.out_of_memory());
}

}  // namespace
}  // namespace muster::base
