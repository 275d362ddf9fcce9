#include "workers/agent/limits.h"

#include <unistd.h>

#include <sstream>

namespace muster::workers::agent {

AgentLimits set_up_limits(const api::AgentEnvironment& env, const base::Cgroup& v2) {
  AgentLimits out;
  // Named after the agent too, so that a later agent can tell an abandoned
  // directory (its owner is gone) from a live one.
  base::LimitsRequest request{env.worker_id + "-" + std::to_string(::getpid()), env.cpu, env.memory_gb};
  if (!env.limits_enforced_by.empty()) {
    if (request.cpu > 0) out.report[base::kLimitCpu] = "enforced by " + env.limits_enforced_by;
    if (request.memory_gb > 0) out.report[base::kLimitMemory] = "enforced by " + env.limits_enforced_by;
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
