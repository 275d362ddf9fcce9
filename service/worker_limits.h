// Launch warnings for the limits the workers' host cannot enforce, when that
// host is this one (the local and container backends: their agents set the
// limits on the daemon's host, see workers/agent/limits.h). The host is
// probed at each launch, touching nothing (base::probe_limits, under
// MUSTER_CGROUP_ROOT when that is set, for tests), for a worker cgroup v2
// made under <this process's cgroup>/muster as the backends make it. Remote
// backends' workers report at register instead (the worker's `limits`).
#pragma once

#include <string>
#include <vector>

namespace muster::service {

// One warning per limit (cpu cores, memory GiB) that would not be enforced;
// none unless the workers run on this host (`on_this_host`).
std::vector<std::string> limit_warnings(double cpu, double memory_gb, bool on_this_host);

}  // namespace muster::service
