#include "workers/kubernetes/pod_manifest.h"

#include <cmath>
#include <set>

#include "api/agent_protocol.h"
#include "api/log_capture.h"

namespace muster::workers::kubernetes {

using nlohmann::json;

namespace {

json labels(const std::string& daemon_id, const std::string& worker_id) {
  return {{"app.kubernetes.io/managed-by", "musterd"}, {kDaemonLabel, daemon_id}, {kWorkerLabel, worker_id}};
}

json host_path_volume(const std::string& name, const std::string& path) {
  return {{"name", name}, {"hostPath", {{"path", path}, {"type", "Directory"}}}};
}

}  // namespace

std::string pod_name(const std::string& daemon_id, const std::string& worker_id) {
  return "muster-" + daemon_id + "-" + worker_id;
}

std::string secret_name(const std::string& daemon_id, const std::string& worker_id) {
  return pod_name(daemon_id, worker_id) + "-token";
}

std::string cpu_quantity(double cores) {
  const long long m = std::max(1LL, static_cast<long long>(std::ceil(cores * 1000 - 1e-6)));
  return std::to_string(m) + "m";
}

std::string memory_quantity(double gib) {
  const long long mib = std::max(1LL, static_cast<long long>(std::ceil(gib * 1024 - 1e-6)));
  if (mib % 1024 == 0) return std::to_string(mib / 1024) + "Gi";
  return std::to_string(mib) + "Mi";
}

json pod_manifest(const LaunchSpec& spec, const KubernetesOptions& o, const std::string& daemon_id) {
  std::map<std::string, std::string> env = spec.env;
  api::remove_log_capture_env(env);
  env.erase(api::kEnvAgentToken);  // it is in the Secret (secret_manifest)
  if (auto gpus = env.find(api::kEnvGpuDevices); gpus != env.end()) {
    for (const char* k : {"CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES"}) {
      if (auto it = env.find(k); it != env.end() && it->second == gpus->second) env.erase(it);
    }
    env.erase(gpus);
  }
  env[api::kEnvLimitsEnforcedBy] = "kubernetes";
  env[api::kEnvCgroup] = api::kCgroupNone;
  json env_list = json::array();
  for (const auto& [k, v] : env) env_list.push_back({{"name", k}, {"value", v}});
  env_list.push_back({{"name", api::kEnvAgentToken},
                      {"valueFrom",
                       {{"secretKeyRef", {{"name", secret_name(daemon_id, spec.worker_id)}, {"key", kTokenKey}}}}}});

  std::vector<std::string> command = spec.agent_argv;
  if (!command.empty() && !o.agent_path.empty()) command[0] = o.agent_path;

  json resources = {{"cpu", cpu_quantity(spec.cpu)}, {"memory", memory_quantity(spec.memory_gb)}};
  json limits = resources;
  if (spec.nvidia_gpu > 0) limits["nvidia.com/gpu"] = std::to_string(spec.nvidia_gpu);

  json volumes = json::array();
  json mounts = json::array();
  std::set<std::string> mounted;
  const std::string worker_dir = spec.working_dir.string();
  volumes.push_back({{"name", "worker"}, {"emptyDir", json::object()}});
  mounts.push_back({{"name", "worker"}, {"mountPath", worker_dir}});
  mounted.insert(worker_dir);
  const auto project = env.find(api::kEnvProjectDir);
  if (project != env.end() && !project->second.empty() && o.project_volume.kind != ProjectVolume::Kind::kNone) {
    if (o.project_volume.kind == ProjectVolume::Kind::kHostPath) {
      volumes.push_back(host_path_volume("project", project->second));
    } else {
      volumes.push_back({{"name", "project"}, {"persistentVolumeClaim", {{"claimName", o.project_volume.claim}}}});
    }
    mounts.push_back({{"name", "project"}, {"mountPath", project->second}});
    mounted.insert(project->second);
  }
  for (size_t i = 0; i < o.host_mounts.size(); ++i) {
    if (!mounted.insert(o.host_mounts[i]).second) continue;
    const std::string name = "host-" + std::to_string(i);
    volumes.push_back(host_path_volume(name, o.host_mounts[i]));
    mounts.push_back({{"name", name}, {"mountPath", o.host_mounts[i]}, {"readOnly", true}});
  }

  json container = {{"name", "agent"},
                    {"image", o.image},
                    {"imagePullPolicy", o.image_pull_policy},
                    {"command", command},
                    {"workingDir", worker_dir},
                    {"env", env_list},
                    {"resources", {{"requests", resources}, {"limits", limits}}},
                    {"volumeMounts", mounts}};
  json pod_spec = {{"restartPolicy", "Never"},
                   {"enableServiceLinks", false},
                   {"automountServiceAccountToken", !o.service_account.empty()},
                   {"containers", json::array({container})},
                   {"volumes", volumes}};
  if (!o.service_account.empty()) pod_spec["serviceAccountName"] = o.service_account;
  return {{"apiVersion", "v1"},
          {"kind", "Pod"},
          {"metadata",
           {{"name", pod_name(daemon_id, spec.worker_id)},
            {"namespace", o.namespace_name},
            {"labels", labels(daemon_id, spec.worker_id)}}},
          {"spec", pod_spec}};
}

json secret_manifest(const LaunchSpec& spec, const KubernetesOptions& o, const std::string& daemon_id) {
  const auto token = spec.env.find(api::kEnvAgentToken);
  return {{"apiVersion", "v1"},
          {"kind", "Secret"},
          {"metadata",
           {{"name", secret_name(daemon_id, spec.worker_id)},
            {"namespace", o.namespace_name},
            {"labels", labels(daemon_id, spec.worker_id)}}},
          {"type", "Opaque"},
          {"stringData", {{kTokenKey, token == spec.env.end() ? "" : token->second}}}};
}

}  // namespace muster::workers::kubernetes
