#include "workers/agent/limits.h"

#include <unistd.h>

#include <fstream>
#include <sstream>

namespace muster::workers::agent {
namespace {

// The "oom_kill N" line of memory.oom_control (v1) or memory.events (v2); 0 when absent.
uint64_t oom_kills(const std::string& path) {
  std::ifstream in(path);
  std::string key;
  uint64_t value = 0;
  while (in >> key >> value) {
    if (key == "oom_kill") return value;
  }
  return 0;
}

}  // namespace

bool AgentLimits::out_of_memory() const {
  if (cgroup.out_of_memory()) return true;
  return !enclosing_oom_file.empty() && oom_kills(enclosing_oom_file) > enclosing_oom_baseline;
}

AgentLimits set_up_limits(const api::AgentEnvironment& env, const base::Cgroup& v2) {
  AgentLimits out;
  // Named after the agent too, so that a later agent can tell an abandoned
  // directory (its owner is gone) from a live one.
  base::LimitsRequest request{env.worker_id + "-" + std::to_string(::getpid()), env.cpu, env.memory_gb};
  if (!env.limits_enforced_by.empty()) {
    if (request.cpu > 0) out.report[base::kLimitCpu] = "enforced by " + env.limits_enforced_by;
    if (request.memory_gb > 0) out.report[base::kLimitMemory] = "enforced by " + env.limits_enforced_by;
    const std::string root = env.cgroup_root.empty() ? std::string("/sys/fs/cgroup") : env.cgroup_root;
    for (const std::string& file : {root + "/memory/memory.oom_control", root + "/memory.events"}) {
      if (std::ifstream(file).good()) {
        out.enclosing_oom_file = file;
        out.enclosing_oom_baseline = oom_kills(file);
        break;
      }
    }
    return out;
  }
  const auto mounts = base::CgroupMounts::for_limits(env.cgroup_root);
  base::sweep_abandoned_limits(mounts);
  out.cgroup = base::CgroupLimits::apply(mounts, v2, request);
  out.report = out.cgroup.report();
  return out;
}

std::string describe_limits(const api::AgentEnvironment& env, const base::LimitReport& report) {
  std::ostringstream what;
  what << "cpu=" << env.cpu << " memory=" << env.memory_gb << "GiB:";
  bool first = true;
  for (const auto& [resource, how] : report) {
    what << (first ? " " : ", ") << resource << " " << how;
    first = false;
  }
  if (first) what << " none asked";
  return what.str();
}

}  // namespace muster::workers::agent
