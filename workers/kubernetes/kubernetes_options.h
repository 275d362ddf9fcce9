// KubernetesOptions: what `--backend kubernetes` is configured with, read
// from `--backend-opt key=value` (workers/backend_options.h's dialects; an
// error names the key).
//
// Where the API server is, in this order:
//   kubeconfig=PATH   its current-context: the cluster's server and CA (file
//                     or data), the user's token (or tokenFile) or client
//                     certificate and key (files or data), the context's
//                     namespace. Read with yaml-cpp (a kubeconfig is YAML;
//                     the JSON form is YAML too). Exec and auth-provider
//                     plugins are refused: they run programs.
//   api_server=https://HOST[:PORT]  with token=... or token_file=PATH and
//                     ca_file=PATH (each also overrides the kubeconfig's).
//   in a pod          KUBERNETES_SERVICE_HOST/PORT and the service account's
//                     token, ca.crt and namespace under
//                     /var/run/secrets/kubernetes.io/serviceaccount.
#pragma once

#include <chrono>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "api/status.h"
#include "workers/kubernetes/api_client.h"

namespace muster::workers::kubernetes {

// Where the in-cluster defaults come from (the process's own, or a test's).
struct InClusterSource {
  std::map<std::string, std::string> env;  // KUBERNETES_SERVICE_HOST, KUBERNETES_SERVICE_PORT
  std::filesystem::path service_account_dir = "/var/run/secrets/kubernetes.io/serviceaccount";
  static InClusterSource from_process();
};

// How the project directory reaches the pods.
struct ProjectVolume {
  enum class Kind { kHostPath, kClaim, kNone } kind = Kind::kHostPath;
  std::string claim;  // kClaim: a PersistentVolumeClaim's name (ReadWriteMany on a real cluster)
};

struct KubernetesOptions {
  std::filesystem::path state_dir;  // the daemon's; <state>/kubernetes/ holds the daemon id
  ClusterConnection connection;
  std::string api_server;            // as given or found (for messages)
  std::string namespace_name = "default";
  std::string image;                 // required: an image with muster-agent (and the runtime)
  std::string image_pull_policy = "IfNotPresent";
  std::string service_account;       // "" = the namespace's default
  std::string master_address;        // default: this host's address towards the API server
  std::vector<std::string> host_mounts;  // host paths mounted read-only at the same path
  ProjectVolume project_volume;
  std::string agent_path;            // inside the image; "" = the agent's path on this host
  std::string daemon_id;             // "" = made once and kept in <state>/kubernetes/daemon-id
  std::chrono::milliseconds poll_interval{2000};  // nodes, the gangs' fit, finished pods
  bool gang = true;                  // a cluster's pods are created only when all fit
  bool keep_finished_pods = false;   // delete a pod (and its Secret) once it ended and its log is read
  bool start_threads = true;         // false in unit tests: they drive the steps themselves
  // mpi clusters: the kubectl whose `exec` starts Open MPI's daemons in the
  // hosts' pods (kubernetes_mpi.cc); a name is looked up on PATH.
  std::string kubectl = "kubectl";

  // Keys: api_server, token, token_file, ca_file, kubeconfig, namespace,
  // image, image_pull_policy, service_account, master_address, host_mounts
  // (comma list), project_volume (hostPath | pvc:<claim> | none),
  // agent_path, daemon_id, poll_ms, gang, keep_finished_pods, kubectl.
  static api::Result<KubernetesOptions> from_map(const std::filesystem::path& state_dir,
                                                 const std::map<std::string, std::string>& opts,
                                                 const InClusterSource& in_cluster = InClusterSource::from_process());
};

// The current context of a kubeconfig (YAML or JSON) as a connection and
// the context's namespace ("" when it names none). Relative file names are
// read beside the kubeconfig. invalid_argument (field "kubeconfig") naming
// what is missing or unsupported.
struct Kubeconfig {
  ClusterConnection connection;
  std::string server;
  std::string namespace_name;
};
api::Result<Kubeconfig> read_kubeconfig(const std::filesystem::path& path);

// "https://host[:port][/]" -> host and port (443 by default); only https.
api::Status parse_api_server(const std::string& url, ClusterConnection* out);

}  // namespace muster::workers::kubernetes
