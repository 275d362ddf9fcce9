// workers/agent/limits: with the limits enforced by the runtime (a pod's), the
// agent makes no cgroup and still tells an OOM kill from the enclosing
// cgroup's counter.
#include "workers/agent/limits.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

namespace fs = std::filesystem;
using muster::workers::agent::set_up_limits;

namespace {

fs::path temp_root(const std::string& name) {
  fs::path root = fs::temp_directory_path() / ("muster_agent_limits_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(root);
  fs::create_directories(root);
  return root;
}

muster::api::AgentEnvironment enforced_env(const fs::path& root) {
  muster::api::AgentEnvironment env;
  env.worker_id = "w1";
  env.cpu = 0.5;
  env.memory_gb = 0.125;
  env.limits_enforced_by = "kubernetes";
  env.cgroup_root = root.string();
  return env;
}

}  // namespace

TEST(AgentLimits, EnforcedByTheRuntimeCountsItsV1OomKills) {
  const fs::path root = temp_root("v1");
  fs::create_directories(root / "memory");
  std::ofstream(root / "memory" / "memory.oom_control") << "oom_kill_disable 0\nunder_oom 0\noom_kill 2\n";
  auto limits = set_up_limits(enforced_env(root), muster::base::Cgroup());
  EXPECT_EQ(limits.report.at(muster::base::kLimitMemory), "enforced by kubernetes");
  EXPECT_FALSE(limits.out_of_memory()) << "kills before the agent started are not its worker's";
  std::ofstream(root / "memory" / "memory.oom_control", std::ios::trunc) << "oom_kill_disable 0\nunder_oom 0\noom_kill 3\n";
  EXPECT_TRUE(limits.out_of_memory());
  fs::remove_all(root);
}

TEST(AgentLimits, EnforcedByTheRuntimeCountsItsV2OomKills) {
  const fs::path root = temp_root("v2");
  std::ofstream(root / "memory.events") << "low 0\nhigh 0\nmax 0\noom 0\noom_kill 0\n";
  auto limits = set_up_limits(enforced_env(root), muster::base::Cgroup());
  EXPECT_FALSE(limits.out_of_memory());
  std::ofstream(root / "memory.events", std::ios::trunc) << "low 0\nhigh 0\nmax 1\noom 1\noom_kill 1\n";
  EXPECT_TRUE(limits.out_of_memory());
  fs::remove_all(root);
}

TEST(AgentLimits, EnforcedByTheRuntimeWithoutACounterIsNeverOutOfMemory) {
  const fs::path root = temp_root("none");
  auto limits = set_up_limits(enforced_env(root), muster::base::Cgroup());
  EXPECT_TRUE(limits.enclosing_oom_file.empty());
  EXPECT_FALSE(limits.out_of_memory());
  fs::remove_all(root);
}
