// Resource limits for the worker's script: written into the worker's cgroup
// (cpu.max from cpu cores, memory.max from GiB) where its controllers are
// enabled, otherwise recorded only. Never fails the launch; returns one line
// saying what was enforced, which the agent prints to the worker's log.
#pragma once

#include <string>

#include "api/base/cgroup.h"

namespace muster::workers::agent {

std::string apply_limits(const base::Cgroup& cgroup, double cpu, double memory_gb);

}  // namespace muster::workers::agent
