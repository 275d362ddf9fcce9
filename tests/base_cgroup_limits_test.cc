// api/base/cgroup_limits.h against a fake cgroup root: a temp directory
// stands in for /sys/fs/cgroup, holding the files the kernel would make, and
// each test asserts the exact files written on the v1 and the v2 layout.
#include "api/base/cgroup_limits.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <sstream>

namespace muster::base {
namespace {

namespace fs = std::filesystem;

std::string read(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

void put(const fs::path& p, const std::string& text = "") {
  fs::create_directories(p.parent_path());
  std::ofstream(p) << text;
}

class FakeRoot : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() / ("muster-cgroup-limits-" + std::to_string(::getpid()) + "-" +
                                         ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root_);
    fs::create_directories(root_);
  }
  void TearDown() override { fs::remove_all(root_); }

  // What the kernel makes in a new v1 directory of `controller`'s hierarchy.
  void v1_worker_dir(const std::string& controller, const std::string& name, bool memsw) {
    const fs::path d = root_ / controller / ("muster-" + name);
    put(d / "cgroup.procs");
    if (controller == "memory") {
      put(d / "memory.limit_in_bytes", "9223372036854771712\n");
      put(d / "memory.oom_control", "oom_kill_disable 0\nunder_oom 0\noom_kill 0\n");
      if (memsw) put(d / "memory.memsw.limit_in_bytes", "9223372036854771712\n");
    } else {
      put(d / "cpu.cfs_period_us", "100000\n");
      put(d / "cpu.cfs_quota_us", "-1\n");
    }
  }

  fs::path root_;
};

TEST(CgroupMounts, ParsesAHybridHost) {
  const std::string mountinfo =
      "31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n"
      "32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu\n"
      "35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n"
      "41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n";
  const std::string own = "4:memory:/process_api/abc\n1:cpu:/\n0::/\n";
  const auto m = CgroupMounts::parse(mountinfo, own);
  EXPECT_EQ(m.v2_root, fs::path("/sys/fs/cgroup/unified"));
  EXPECT_EQ(m.v2_own, fs::path("/sys/fs/cgroup/unified"));
  EXPECT_EQ(m.v1_own.at("memory"), fs::path("/sys/fs/cgroup/memory/process_api/abc"));
  EXPECT_EQ(m.v1_own.at("cpu"), fs::path("/sys/fs/cgroup/cpu"));
}

TEST(CgroupMounts, ParsesAPureV2HostAndCombinedV1Mounts) {
  const auto v2 = CgroupMounts::parse("30 1 0:26 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw,nsdelegate\n",
                                      "0::/user.slice/user-1000.slice/session-2.scope\n");
  EXPECT_EQ(v2.v2_own, fs::path("/sys/fs/cgroup/user.slice/user-1000.slice/session-2.scope"));
  EXPECT_TRUE(v2.v1_own.empty());
  // cpu and cpuacct in one hierarchy, mounted with a root of its own (a container).
  const auto v1 = CgroupMounts::parse("33 31 0:30 /docker/x /sys/fs/cgroup/cpu,cpuacct rw - cgroup cgroup rw,cpu,cpuacct\n",
                                      "3:cpu,cpuacct:/docker/x/job\n");
  EXPECT_EQ(v1.v1_own.at("cpu"), fs::path("/sys/fs/cgroup/cpu,cpuacct/job"));
  EXPECT_FALSE(v1.v2_root);
}

TEST_F(FakeRoot, V1WritesLimitInBytesMemswAndCfsQuota) {
  fs::create_directories(root_ / "memory");
  fs::create_directories(root_ / "cpu");
  v1_worker_dir("memory", "w1", true);
  v1_worker_dir("cpu", "w1", false);
  const auto mounts = CgroupMounts::under(root_);
  auto limits = CgroupLimits::apply(mounts, Cgroup(), {"w1", 0.5, 1.0});
  EXPECT_EQ(limits.report().at("cpu"), "enforced by cgroup v1");
  EXPECT_EQ(limits.report().at("memory"), "enforced by cgroup v1");
  const fs::path mem = root_ / "memory/muster-w1", cpu = root_ / "cpu/muster-w1";
  EXPECT_EQ(read(mem / "memory.limit_in_bytes"), "1073741824");
  EXPECT_EQ(read(mem / "memory.memsw.limit_in_bytes"), "1073741824");
  EXPECT_EQ(read(cpu / "cpu.cfs_period_us"), "100000");
  EXPECT_EQ(read(cpu / "cpu.cfs_quota_us"), "50000");
  ASSERT_EQ(limits.v1_dirs().size(), 2u);
  EXPECT_EQ(limits.join(4242), std::nullopt);
  EXPECT_EQ(read(mem / "cgroup.procs"), "4242");
  EXPECT_EQ(read(cpu / "cgroup.procs"), "4242");
  // The kernel's counter, not the exit signal, says out of memory.
  EXPECT_FALSE(limits.out_of_memory());
  put(mem / "memory.oom_control", "oom_kill_disable 0\nunder_oom 0\noom_kill 1\n");
  EXPECT_TRUE(limits.out_of_memory());
  // remove() deletes the directories once the kernel's files are gone with them.
  EXPECT_FALSE(limits.remove());
  for (const auto& d : {mem, cpu}) {
    for (const auto& f : fs::directory_iterator(d)) fs::remove(f.path());
  }
  EXPECT_TRUE(limits.remove());
  EXPECT_FALSE(fs::exists(mem));
  EXPECT_FALSE(fs::exists(cpu));
}

TEST_F(FakeRoot, V1WithoutSwapAccountingAndATinyCpu) {
  fs::create_directories(root_ / "memory");
  fs::create_directories(root_ / "cpu");
  v1_worker_dir("memory", "w2", false);
  v1_worker_dir("cpu", "w2", false);
  auto limits = CgroupLimits::apply(CgroupMounts::under(root_), Cgroup(), {"w2", 0.001, 0.5});
  EXPECT_EQ(read(root_ / "memory/muster-w2/memory.limit_in_bytes"), "536870912");
  EXPECT_FALSE(fs::exists(root_ / "memory/muster-w2/memory.memsw.limit_in_bytes"));
  EXPECT_EQ(read(root_ / "cpu/muster-w2/cpu.cfs_quota_us"), "1000");  // the kernel's floor
}

TEST_F(FakeRoot, NoControllerSaysWhyAndMakesNothing) {
  const auto mounts = CgroupMounts::under(root_);  // an empty root: no hierarchy at all
  auto limits = CgroupLimits::apply(mounts, Cgroup(), {"w3", 1, 1});
  EXPECT_EQ(limits.report().at("memory"),
            "not enforced: the worker has no cgroup v2; no cgroup v1 memory hierarchy is mounted");
  EXPECT_EQ(limits.report().at("cpu"), "not enforced: the worker has no cgroup v2; no cgroup v1 cpu hierarchy is mounted");
  EXPECT_TRUE(limits.v1_dirs().empty());
  EXPECT_EQ(limits.join_child(), 0);
  EXPECT_FALSE(limit_enforced(limits.report().at("cpu")));
  const auto probed = probe_limits(mounts, std::nullopt, {"w3", 1, 1});
  EXPECT_EQ(probed, limits.report());
}

TEST_F(FakeRoot, V2WritesMemoryMaxSwapMaxAndCpuMax) {
  const fs::path v2 = root_ / "unified";
  put(v2 / "cgroup.controllers", "cpu memory pids\n");
  put(v2 / "muster/cgroup.controllers", "cpu memory\n");
  put(v2 / "muster/cgroup.subtree_control", "cpu memory\n");
  const fs::path worker = v2 / "muster/w4";
  for (const char* f : {"memory.max", "memory.swap.max", "cpu.max", "cgroup.procs"}) put(worker / f, "max\n");
  put(worker / "memory.events", "low 0\nhigh 0\nmax 3\noom 1\noom_kill 0\n");
  const auto mounts = CgroupMounts::under(root_);
  EXPECT_EQ(probe_limits(mounts, v2 / "muster", {"w4", 1.5, 2}).at("memory"), "enforced by cgroup v2");
  auto limits = CgroupLimits::apply(mounts, Cgroup(worker), {"w4", 1.5, 2});
  EXPECT_EQ(limits.report().at("memory"), "enforced by cgroup v2");
  EXPECT_EQ(limits.report().at("cpu"), "enforced by cgroup v2");
  EXPECT_EQ(read(worker / "memory.max"), "2147483648");
  EXPECT_EQ(read(worker / "memory.swap.max"), "0");
  EXPECT_EQ(read(worker / "cpu.max"), "150000 100000");
  EXPECT_TRUE(limits.v1_dirs().empty());  // v2 is joined by the agent itself
  EXPECT_FALSE(limits.out_of_memory());
  put(worker / "memory.events", "low 0\nhigh 0\nmax 9\noom 2\noom_kill 1\n");
  EXPECT_TRUE(limits.out_of_memory());
}

TEST_F(FakeRoot, V2EnablesAControllerTheParentOffers) {
  const fs::path v2 = root_ / "unified";
  put(v2 / "cgroup.controllers", "cpu memory\n");
  put(v2 / "muster/cgroup.controllers", "cpu memory\n");
  put(v2 / "muster/cgroup.subtree_control", "");
  put(v2 / "muster/w5/cgroup.procs");
  // The fake kernel makes no memory.max on "+memory": the limit then falls
  // back to v1, which this root lacks, and the report says both.
  auto limits = CgroupLimits::apply(CgroupMounts::under(root_), Cgroup(v2 / "muster/w5"), {"w5", 0, 1});
  EXPECT_EQ(read(v2 / "muster/cgroup.subtree_control"), "+memory");
  EXPECT_EQ(limits.report().at("memory"),
            "not enforced: cgroup v2 " + (v2 / "muster/w5").string() +
                " has no memory.max after enabling memory; no cgroup v1 memory hierarchy is mounted");
  EXPECT_EQ(limits.report().count("cpu"), 0u);  // not asked
}

TEST_F(FakeRoot, HybridFallsBackToV1WhereV2LacksTheController) {
  const fs::path v2 = root_ / "unified";
  put(v2 / "cgroup.controllers", "hugetlb\n");
  put(v2 / "muster/cgroup.controllers", "");
  put(v2 / "muster/cgroup.subtree_control", "");
  put(v2 / "muster/w6/cgroup.procs");
  fs::create_directories(root_ / "memory");
  v1_worker_dir("memory", "w6", false);
  const auto mounts = CgroupMounts::under(root_);
  auto limits = CgroupLimits::apply(mounts, Cgroup(v2 / "muster/w6"), {"w6", 1, 1});
  EXPECT_EQ(limits.report().at("memory"), "enforced by cgroup v1");
  EXPECT_EQ(limits.report().at("cpu"), "not enforced: cgroup v2 " + v2.string() +
                                           " has no cpu controller (it has: hugetlb); "
                                           "no cgroup v1 cpu hierarchy is mounted");
  const auto probed = probe_limits(mounts, v2 / "muster", {"w6", 1, 1});
  EXPECT_EQ(probed.at("memory"), "enforced by cgroup v1");
  EXPECT_FALSE(limit_enforced(probed.at("cpu")));
}

TEST_F(FakeRoot, ProbeOfAParentNotMadeYetReadsWhatItsParentPassesDown) {
  const fs::path v2 = root_ / "unified";
  put(v2 / "cgroup.controllers", "cpu memory\n");
  put(v2 / "cgroup.subtree_control", "memory\n");
  put(v2 / "daemon/cgroup.controllers", "memory\n");
  put(v2 / "daemon/cgroup.subtree_control", "\n");
  const auto mounts = CgroupMounts::under(root_);
  // The root may enable what it has.
  EXPECT_EQ(probe_limits(mounts, v2 / "muster", {"x", 1, 1}).at("cpu"), "enforced by cgroup v2");
  const auto nested = probe_limits(mounts, v2 / "daemon/muster", {"x", 1, 1});
  EXPECT_EQ(nested.at("memory"), "not enforced: cgroup v2 " + (v2 / "daemon").string() +
                                     " does not pass the memory controller down (it has: memory); "
                                     "no cgroup v1 memory hierarchy is mounted");
}

// What a killed agent left goes; a live owner's directory, empty or not, stays.
TEST_F(FakeRoot, SweepRemovesOnlyEmptyDirectoriesOfOwnersThatEnded) {
  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  ASSERT_GT(child, 0);
  ::waitpid(child, nullptr, 0);  // now an ended pid
  const std::string dead = std::to_string(child), alive = std::to_string(::getpid());
  for (const char* c : {"memory", "cpu"}) {
    fs::create_directories(root_ / c / ("muster-w1-" + dead));
    fs::create_directories(root_ / c / ("muster-w2-" + alive));
  }
  put(root_ / "memory" / ("muster-w3-" + dead) / "cgroup.procs", "77\n");  // not empty: rmdir refuses
  fs::create_directories(root_ / "memory" / "muster-notapid");
  fs::create_directories(root_ / "memory" / ("other-" + dead));
  EXPECT_EQ(sweep_abandoned_limits(CgroupMounts::under(root_)), 2u);
  for (const char* c : {"memory", "cpu"}) {
    EXPECT_FALSE(fs::exists(root_ / c / ("muster-w1-" + dead))) << c;
    EXPECT_TRUE(fs::exists(root_ / c / ("muster-w2-" + alive))) << c;
  }
  EXPECT_TRUE(fs::exists(root_ / "memory" / ("muster-w3-" + dead)));
  EXPECT_TRUE(fs::exists(root_ / "memory" / "muster-notapid"));
  EXPECT_TRUE(fs::exists(root_ / "memory" / ("other-" + dead)));
}

}  // namespace
}  // namespace muster::base
