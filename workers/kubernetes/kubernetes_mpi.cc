// KubernetesBackend as MpiHosts: how mpirun on the daemon's host reaches the
// pods of an mpi cluster without sshd in them.
//
// Step by step (preflight_mpi): a) every host address the cluster names is
// looked up among the daemon's running pods (status.podIP, from the one
// watch's cache, listed again for up to 5 s while one is missing: the
// agent's registration can come before the pod's IP reaches the watch);
// one with no pod is named in the error; b) the kubectl to
// use is found (--backend-opt kubectl, a name looked up on PATH); c) a
// kubeconfig for it is written from the backend's own connection (server,
// CA, token or client certificate: the same identity the REST calls use,
// so the Role needs `pods/exec: create` besides) and the map that
// muster-kube-rsh reads, both 0600 under <state>/kubernetes/mpi/; d) the
// answer is rsh_agent = "<dir of musterd>/muster-kube-rsh <map>", which runs
// Open MPI's daemon with `kubectl exec` in the pod's agent container.
#include <unistd.h>

#include <cstdlib>
#include <functional>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>

#include <spdlog/spdlog.h>

#include "api/base/atomic_file.h"
#include "api/base/base64.h"
#include "workers/kubernetes/backend_pod.h"
#include "workers/kubernetes/pod_state.h"

namespace muster::workers::kubernetes {

namespace {

constexpr int kPreflightLists = 10;  // fresh lists, 0.5 s apart, before a host without a pod is refused

// `name` itself when it holds a '/', else the first executable of that name on PATH; "" when none.
std::string find_program(const std::string& name) {
  if (name.find('/') != std::string::npos) return ::access(name.c_str(), X_OK) == 0 ? name : "";
  const char* path = std::getenv("PATH");
  std::stringstream dirs(path ? path : "/usr/local/bin:/usr/bin:/bin");
  for (std::string dir; std::getline(dirs, dir, ':');) {
    if (dir.empty()) continue;
    const std::string candidate = dir + "/" + name;
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return "";
}

// A kubeconfig (JSON, which is YAML) for `c`, namespace `ns`.
std::string kubeconfig_for(const ClusterConnection& c, const std::string& ns) {
  const std::string host = c.host.find(':') != std::string::npos ? "[" + c.host + "]" : c.host;  // IPv6
  json cluster = {{"server", "https://" + host + ":" + std::to_string(c.port)}};
  if (!c.ca_pem.empty()) cluster["certificate-authority-data"] = base::base64_encode(c.ca_pem);
  json user = json::object();
  if (!c.token.empty()) user["token"] = c.token;
  if (!c.client_cert_pem.empty()) {
    user["client-certificate-data"] = base::base64_encode(c.client_cert_pem);
    user["client-key-data"] = base::base64_encode(c.client_key_pem);
  }
  return json{{"apiVersion", "v1"},
              {"kind", "Config"},
              {"clusters", {{{"name", "muster"}, {"cluster", cluster}}}},
              {"users", {{{"name", "musterd"}, {"user", user}}}},
              {"contexts", {{{"name", "muster"}, {"context", {{"cluster", "muster"}, {"user", "musterd"}, {"namespace", ns}}}}}},
              {"current-context", "muster"}}
      .dump(1);
}

}  // namespace

api::Result<MpiLaunchSettings> KubernetesBackend::preflight_mpi(const MpiHostsRequest& request) {
  std::string map;
  std::vector<std::string> problems;
  // The agents registered their addresses from inside the pods, which can
  // come before the kubelet's status with the pod's IP reaches the watch:
  // a host not in the cache yet is looked for again in a fresh list, for a
  // few seconds.
  auto look_up = [&] {
    map.clear();
    problems.clear();
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& host : request.hosts) {
      std::string pod_name;
      for (const auto& [id, pod] : pods_) {
        if (!pod->known || pod->object.is_null() || pod->gone) continue;
        const PodView v = view_of(pod->object);
        if (v.terminal || pod->object.value("/status/podIP"_json_pointer, std::string()) != host) continue;
        pod_name = v.name;
      }
      if (pod_name.empty()) {
        problems.push_back(host + ": no running pod of this daemon has this address");
        continue;
      }
      map += "host " + host + " " + pod_name + "\n";
    }
  };
  look_up();
  for (int attempt = 0; !problems.empty() && attempt < kPreflightLists && options_.start_threads; ++attempt) {
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    if (auto s = relist(); !s) spdlog::debug("kubernetes: listing pods for an mpi preflight: {}", s.message());
    look_up();
  }
  if (!problems.empty()) {
    std::string all;
    for (const auto& p : problems) all += (all.empty() ? "" : "; ") + p;
    return api::unavailable("cannot reach every host's pod: " + all);
  }
  const std::string kubectl = find_program(options_.kubectl);
  if (kubectl.empty()) {
    return api::unavailable("mpi clusters on pods start Open MPI's daemons with `kubectl exec`, and no kubectl '" +
                            options_.kubectl + "' is found (on PATH); give its path with --backend-opt kubectl=PATH");
  }
  const fs::path dir = options_.state_dir / "kubernetes" / "mpi";
  std::error_code ec;
  fs::create_directories(dir, ec);
  const fs::path config = dir / "kubeconfig";
  if (auto err = base::write_file_atomically(config, kubeconfig_for(options_.connection, options_.namespace_name),
                                             {0600})) {
    return api::internal_error(*err);
  }
  map = "kubectl " + kubectl + "\nkubeconfig " + config.string() + "\nnamespace " + options_.namespace_name + "\n" + map;
  // One map per host set; mpirun passes the agent's words on as they are.
  const fs::path map_path = dir / ("rsh-" + std::to_string(std::hash<std::string>{}(map)));
  if (auto err = base::write_file_atomically(map_path, map, {0600})) return api::internal_error(*err);
  MpiLaunchSettings out;
  out.rsh_agent = (fs::read_symlink("/proc/self/exe").parent_path() / "muster-kube-rsh").string() + " " +
                  map_path.string();
  return out;
}

}  // namespace muster::workers::kubernetes
