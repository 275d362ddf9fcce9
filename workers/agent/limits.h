// Resource limits for the worker's script: cgroup v2 where the agent may
// create a group (cpu.max from cpu cores, memory.max from GiB), otherwise
// recorded only. Never fails the launch; returns one line saying what was
// enforced, which the agent prints to the worker's log.
#pragma once

#include <string>
#include <sys/types.h>

namespace muster::workers::agent {

std::string apply_limits(const std::string& worker_id, double cpu, double memory_gb, pid_t pid);

}  // namespace muster::workers::agent
