#include "workers/agent/limits.h"

#include <sstream>

namespace muster::workers::agent {

AgentLimits set_up_limits(const api::AgentEnvironment& env, const base::Cgroup& v2) {
  AgentLimits out;
  base::LimitsRequest request{env.worker_id, env.cpu, env.memory_gb};
  if (!env.limits_enforced_by.empty()) {
    if (request.cpu > 0) out.report[base::kLimitCpu] = "enforced by " + env.limits_enforced_by;
    if (request.memory_gb > 0) out.report[base::kLimitMemory] = "enforced by " + env.limits_enforced_by;
    return out;
  }
  out.cgroup = base::CgroupLimits::apply(base::CgroupMounts::for_limits(env.cgroup_root), v2, request);
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
