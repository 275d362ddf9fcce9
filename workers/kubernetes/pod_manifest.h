// The Pod and Secret one worker becomes (kubernetes_backend.h says when).
//
// - Pod `muster-<daemon id>-<worker id>`, restartPolicy Never, labels
//   muster.io/daemon and muster.io/worker (and app.kubernetes.io/managed-by).
// - One container, `agent`: the agent's argv as its command (argv[0] mapped
//   to agent_path when given), the spec's env but MUSTER_LOG_* (the daemon
//   writes the log from the pod's log stream) and the daemon-host GPU list
//   (the device plugin picks the pod's GPUs), plus
//   MUSTER_LIMITS_ENFORCED_BY=kubernetes and MUSTER_CGROUP=none (the pod's
//   cgroup is the worker's); MUSTER_AGENT_TOKEN from the worker's Secret
//   (secretKeyRef), never inline, so it is not in the Pod object that every
//   `get pods` reader sees.
// - requests = limits: cpu in millicores ("500m"), memory in Mi ("1536Mi",
//   "2Gi" when whole), nvidia.com/gpu when asked.
// - workingDir = the worker's own directory (an emptyDir at the same path:
//   the agent's scratch and released files), the project directory at its
//   path (hostPath, a PVC, or nothing), each host_mounts path read-only by
//   hostPath at the same path.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "workers/backend.h"
#include "workers/kubernetes/kubernetes_options.h"

namespace muster::workers::kubernetes {

inline constexpr const char* kDaemonLabel = "muster.io/daemon";
inline constexpr const char* kWorkerLabel = "muster.io/worker";
inline constexpr const char* kTokenKey = "agent-token";

std::string pod_name(const std::string& daemon_id, const std::string& worker_id);
std::string secret_name(const std::string& daemon_id, const std::string& worker_id);

// "500m", "2000m" (rounded up to a millicore).
std::string cpu_quantity(double cores);
// "2Gi" when whole, else "1536Mi" (rounded up to a MiB).
std::string memory_quantity(double gib);

nlohmann::json pod_manifest(const LaunchSpec& spec, const KubernetesOptions& options, const std::string& daemon_id);
// The Secret holding the worker's agent token (stringData).
nlohmann::json secret_manifest(const LaunchSpec& spec, const KubernetesOptions& options, const std::string& daemon_id);

}  // namespace muster::workers::kubernetes
