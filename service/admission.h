// Admission: whether a launch's workers fit on their host beside the workers
// that already hold it, in CPUs and memory, the check a scheduler makes
// before it places a pod or a job (Kubernetes' "Insufficient cpu", Slurm's
// "Resources"). Pure arithmetic and the words for it; the registry decides
// what to do with the answer (registry/registry.h, "Admission"):
// - overcommit allowed (musterd's default): the launch runs, with a warning
//   naming the totals (overcommit_warning());
// - overcommit refused (musterd --overcommit=false): the workers wait in
//   `scheduling` with wait_reason() until enough is free; an ask that the
//   host could not hold even empty is refused (never_fits()).
//
// Which host: the local and container backends place every worker on the
// daemon's host, whose capacity is host_capacity(). Other backends have no
// admission here: ssh places workers by its inventory's slots itself, and
// Slurm queues them in its own scheduler.
//
// Memory is in GB as the API counts it (the request's `memory`, compared
// with MemTotal in GiB, as cdsw does).
#pragma once

#include <string>

namespace muster::service {

// What the workers' host has.
struct HostCapacity {
  int cpus = 0;           // 0: unknown (no CPU admission)
  double memory_gb = 0;   // MemTotal; 0: unknown (no memory admission)
};

// This host: the CPUs this process may run on (its affinity mask, which a
// container's cpuset narrows) and MemTotal.
HostCapacity host_capacity();

// CPUs and memory asked for, summed over workers.
struct Demand {
  double cpu = 0;
  double memory_gb = 0;
  Demand& operator+=(const Demand& o) {
    cpu += o.cpu;
    memory_gb += o.memory_gb;
    return *this;
  }
};

// `in_use` (the workers on the host that have not ended) plus `ask` against
// `host`: what is missing of each (0: it fits) and the totals.
struct Shortfall {
  double cpus = 0;
  double memory_gb = 0;
  Demand total;  // in_use + ask
  bool any() const { return cpus > 0 || memory_gb > 0; }
};
Shortfall shortfall(const HostCapacity& host, const Demand& in_use, const Demand& ask);

// A waiting worker's reason: "waiting for 2 CPUs: 4 of 2 requested" (and/or
// "waiting for 1.5 GB of memory: 9.5 of 8 GB requested", joined by "; ").
std::string wait_reason(const HostCapacity& host, const Shortfall& s);

// The launch answer's warning when overcommit is allowed: "this launch takes
// the host's CPUs past its capacity: 6 of 2 CPUs requested (4 by the workers
// already there, 2 by this launch); they share them ..." (one per resource,
// joined by "; ").
std::string overcommit_warning(const HostCapacity& host, const Shortfall& s, const Demand& in_use);

// The refusal of an ask the host could not hold even with nothing else on it
// (overcommit refused): "a worker: 4 CPUs asked for and this host has 2, so
// it could never start (musterd --overcommit=false); ask for less"; `what`
// names the ask ("a worker", "this cluster's 3 workers").
std::string never_fits(const HostCapacity& host, const Shortfall& alone, const std::string& what);

}  // namespace muster::service
