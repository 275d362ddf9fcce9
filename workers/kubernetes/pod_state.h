// What a Pod object (as the API server returns or a watch event carries it)
// says of its worker, and what a Node object says of its health.
//
// Mapping (onto workers/backend.h's ProcessStatus)
// - not yet scheduled (PodScheduled absent or False): kPending with the
//   scheduler's reason and message ("Unschedulable: 0/1 nodes are available:
//   1 Insufficient memory."), as Slurm's queue reason is;
// - scheduled to a node (phase Pending while the image and container start,
//   or Running): kRunning, so the registry's startup timeout counts from the
//   placement (a bad image ends as a startup timeout, with the kubelet's
//   waiting reason in the log);
// - Succeeded / Failed: kExited with the container's exit code; OOMKilled,
//   Evicted, DeadlineExceeded and the kubelet's admission refusals
//   (OutOfcpu, OutOfmemory, ...) are named in the reason and end the worker
//   `failed`; NodeLost / Shutdown end it `lost`; anything else is left to the
//   registry's rule (the agent's own report normally came first).
#pragma once

#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "workers/backend.h"

namespace muster::workers::kubernetes {

struct PodView {
  std::string name, uid, worker_id, node, phase;
  bool scheduled = false;
  bool container_started = false;  // running or terminated: its log can be read
  bool terminal = false;           // Succeeded or Failed
  std::string resource_version;
};

PodView view_of(const nlohmann::json& pod);
ProcessStatus pod_status(const nlohmann::json& pod);

// The node's Ready condition: nullopt when True, else why not ("NotReady
// (Unknown): Kubelet stopped posting node status.").
std::optional<std::string> node_not_ready(const nlohmann::json& node);

}  // namespace muster::workers::kubernetes
