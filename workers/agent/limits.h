// The worker's cpu and memory limits as the agent sets them up, first thing
// (agent.h, step 0): MUSTER_CPU cores and MUSTER_MEMORY_GB GiB, enforced in
// the worker's cgroup v2 (the one leftovers.h joined) or in cgroup v1
// directories of its own (api/base/cgroup_limits.h), under MUSTER_CGROUP_ROOT
// when set (tests). A backend whose runtime enforces the limits itself (a
// pod's) sets MUSTER_LIMITS_ENFORCED_BY: the agent then makes nothing and
// reports "enforced by <it>", and watches the OOM kill counter of the cgroup
// it was started in (the pod's container: memory.oom_control in cgroup v1,
// memory.events in v2), so that a script the runtime's OOM killer ended is
// still reported as out of memory. Never fails the launch; the report goes to the
// daemon at register (the worker record's `limits`) and a line to the log.
#pragma once

#include <cstdint>
#include <string>

#include "api/agent_protocol.h"
#include "api/base/cgroup_limits.h"

namespace muster::workers::agent {

struct AgentLimits {
  base::CgroupLimits cgroup;  // none made with enforced_by
  base::LimitReport report;
  // With enforced_by: the enclosing cgroup's OOM counter file (empty: none
  // readable) and its value at start.
  std::string enclosing_oom_file;
  uint64_t enclosing_oom_baseline = 0;

  // The kernel's OOM killer ended a process since set_up_limits.
  bool out_of_memory() const;
};

AgentLimits set_up_limits(const api::AgentEnvironment& env, const base::Cgroup& v2);

// "cpu=0.5 memory=1GiB: cpu enforced by cgroup v1, memory not enforced: ..."
std::string describe_limits(const api::AgentEnvironment& env, const base::LimitReport& report);

}  // namespace muster::workers::agent
