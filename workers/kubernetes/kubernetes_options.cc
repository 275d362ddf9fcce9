#include "workers/kubernetes/kubernetes_options.h"

#include <cstdlib>
#include <fstream>
#include <sstream>

#include <yaml-cpp/yaml.h>

#include "api/base/base64.h"
#include "api/base/net.h"
#include "workers/backend_options.h"

namespace muster::workers::kubernetes {

namespace fs = std::filesystem;

namespace {

constexpr const char* kKnown =
    "api_server, token, token_file, ca_file, kubeconfig, namespace, image, image_pull_policy, service_account, "
    "master_address, host_mounts, project_volume, agent_path, daemon_id, poll_ms, gang, keep_finished_pods, kubectl";

std::optional<std::string> read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

std::string trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r' || s.back() == ' ')) s.pop_back();
  return s;
}

api::Status bad(const std::string& key, const std::string& why) {
  return api::invalid_argument("--backend-opt " + key + ": " + why, key);
}

// A named entry of a kubeconfig list (clusters, users, contexts); not a map when absent.
YAML::Node named(const YAML::Node& list, const std::string& name, const char* inner) {
  if (!list || !list.IsSequence()) return YAML::Node();
  for (const auto& entry : list) {
    if (entry["name"] && entry["name"].as<std::string>() == name) return entry[inner];
  }
  return YAML::Node();
}

// A file's contents or a *-data field's, base64-decoded.
api::Result<std::string> file_or_data(const YAML::Node& node, const char* file_key, const char* data_key,
                                      const fs::path& dir, const std::string& what) {
  if (node[data_key]) {
    auto decoded = base::base64_decode(trim(node[data_key].as<std::string>()));
    if (!decoded) return api::invalid_argument("the kubeconfig's " + what + " (" + data_key + ") is not base64", "kubeconfig");
    return *decoded;
  }
  if (node[file_key]) {
    fs::path p = node[file_key].as<std::string>();
    if (p.is_relative()) p = dir / p;
    auto text = read_file(p);
    if (!text) return api::invalid_argument("the kubeconfig's " + what + " " + p.string() + " cannot be read", "kubeconfig");
    return *text;
  }
  return std::string();
}

}  // namespace

InClusterSource InClusterSource::from_process() {
  InClusterSource s;
  for (const char* name : {"KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT"}) {
    if (const char* v = std::getenv(name)) s.env[name] = v;
  }
  return s;
}

api::Status parse_api_server(const std::string& url, ClusterConnection* out) {
  const std::string scheme = "https://";
  if (url.rfind(scheme, 0) != 0) {
    return api::invalid_argument("--backend-opt api_server='" + url + "': expected https://HOST[:PORT]", "api_server");
  }
  std::string rest = url.substr(scheme.size());
  if (auto slash = rest.find('/'); slash != std::string::npos) {
    if (rest.find_first_not_of('/', slash) != std::string::npos) {
      return api::invalid_argument("--backend-opt api_server='" + url + "': a path after the host is not supported",
                                   "api_server");
    }
    rest.resize(slash);
  }
  std::string host = rest, port;
  if (!rest.empty() && rest[0] == '[') {  // [v6]:port
    const auto close = rest.find(']');
    if (close == std::string::npos) return api::invalid_argument("--backend-opt api_server='" + url + "': unclosed [", "api_server");
    host = rest.substr(1, close - 1);
    if (close + 1 < rest.size() && rest[close + 1] == ':') port = rest.substr(close + 2);
  } else if (auto colon = rest.rfind(':'); colon != std::string::npos) {
    host = rest.substr(0, colon);
    port = rest.substr(colon + 1);
  }
  if (host.empty()) return api::invalid_argument("--backend-opt api_server='" + url + "': no host", "api_server");
  out->host = host;
  out->port = 443;
  if (!port.empty()) {
    auto p = integer_option("api_server", port, 1, 65535, "a port number");
    if (!p) return p.status();
    out->port = static_cast<int>(*p);
  }
  return api::Status::ok();
}

api::Result<Kubeconfig> read_kubeconfig(const fs::path& path) {
  auto text = read_file(path);
  if (!text) return api::invalid_argument("--backend-opt kubeconfig=" + path.string() + ": cannot be read", "kubeconfig");
  const fs::path dir = path.parent_path();
  Kubeconfig k;
  try {
    const YAML::Node doc = YAML::Load(*text);
    const std::string current = doc["current-context"] ? doc["current-context"].as<std::string>() : "";
    if (current.empty()) return api::invalid_argument("the kubeconfig " + path.string() + " has no current-context", "kubeconfig");
    const YAML::Node context = named(doc["contexts"], current, "context");
    if (!context.IsMap()) return api::invalid_argument("the kubeconfig has no context named '" + current + "'", "kubeconfig");
    const std::string cluster_name = context["cluster"] ? context["cluster"].as<std::string>() : "";
    const std::string user_name = context["user"] ? context["user"].as<std::string>() : "";
    if (context["namespace"]) k.namespace_name = context["namespace"].as<std::string>();
    const YAML::Node cluster = named(doc["clusters"], cluster_name, "cluster");
    if (!cluster.IsMap() || !cluster["server"]) {
      return api::invalid_argument("the kubeconfig's context '" + current + "' names cluster '" + cluster_name +
                                       "', which has no server",
                                   "kubeconfig");
    }
    k.server = cluster["server"].as<std::string>();
    if (auto s = parse_api_server(k.server, &k.connection); !s) {
      return api::invalid_argument("the kubeconfig's server: " + s.message(), "kubeconfig");
    }
    if (cluster["insecure-skip-tls-verify"] && cluster["insecure-skip-tls-verify"].as<bool>()) {
      return api::invalid_argument("the kubeconfig's cluster '" + cluster_name +
                                       "' skips TLS verification; musterd always verifies (give its CA)",
                                   "kubeconfig");
    }
    auto ca = file_or_data(cluster, "certificate-authority", "certificate-authority-data", dir, "CA");
    if (!ca) return ca.status();
    k.connection.ca_pem = *ca;
    const YAML::Node user = named(doc["users"], user_name, "user");
    if (user.IsMap()) {
      if (user["exec"] || user["auth-provider"]) {
        return api::invalid_argument("the kubeconfig's user '" + user_name +
                                         "' uses an exec or auth-provider plugin, which musterd does not run; give "
                                         "--backend-opt token_file=... instead",
                                     "kubeconfig");
      }
      if (user["token"]) k.connection.token = user["token"].as<std::string>();
      if (user["tokenFile"]) {
        fs::path p = user["tokenFile"].as<std::string>();
        if (p.is_relative()) p = dir / p;
        auto t = read_file(p);
        if (!t) return api::invalid_argument("the kubeconfig's tokenFile " + p.string() + " cannot be read", "kubeconfig");
        k.connection.token = trim(*t);
      }
      auto cert = file_or_data(user, "client-certificate", "client-certificate-data", dir, "client certificate");
      if (!cert) return cert.status();
      auto key = file_or_data(user, "client-key", "client-key-data", dir, "client key");
      if (!key) return key.status();
      if (cert->empty() != key->empty()) {
        return api::invalid_argument("the kubeconfig's user '" + user_name + "' has a client certificate or key but not both",
                                     "kubeconfig");
      }
      k.connection.client_cert_pem = *cert;
      k.connection.client_key_pem = *key;
    }
  } catch (const YAML::Exception& e) {
    return api::invalid_argument("the kubeconfig " + path.string() + " is not valid YAML: " + e.what(), "kubeconfig");
  }
  return k;
}

api::Result<KubernetesOptions> KubernetesOptions::from_map(const fs::path& state_dir,
                                                           const std::map<std::string, std::string>& opts,
                                                           const InClusterSource& in_cluster) {
  KubernetesOptions o;
  o.state_dir = state_dir;
  std::optional<std::string> api_server, token, token_file, ca_file, kubeconfig, ns;
  for (const auto& [key, value] : opts) {
    if (key == "api_server") {
      api_server = value;
    } else if (key == "token") {
      token = value;
    } else if (key == "token_file") {
      token_file = value;
    } else if (key == "ca_file") {
      ca_file = value;
    } else if (key == "kubeconfig") {
      kubeconfig = value;
    } else if (key == "namespace") {
      ns = value;
    } else if (key == "image") {
      o.image = value;
    } else if (key == "image_pull_policy") {
      if (value != "Always" && value != "IfNotPresent" && value != "Never") {
        return bad(key, "'" + value + "' is not Always, IfNotPresent or Never");
      }
      o.image_pull_policy = value;
    } else if (key == "service_account") {
      o.service_account = value;
    } else if (key == "master_address") {
      o.master_address = value;
    } else if (key == "host_mounts") {
      std::stringstream in(value);
      for (std::string p; std::getline(in, p, ',');) {
        if (p.empty()) continue;
        if (p[0] != '/') return bad(key, "'" + p + "' is not an absolute path");
        o.host_mounts.push_back(p);
      }
    } else if (key == "project_volume") {
      if (value == "hostPath") {
        o.project_volume.kind = ProjectVolume::Kind::kHostPath;
      } else if (value == "none") {
        o.project_volume.kind = ProjectVolume::Kind::kNone;
      } else if (value.rfind("pvc:", 0) == 0 && value.size() > 4) {
        o.project_volume.kind = ProjectVolume::Kind::kClaim;
        o.project_volume.claim = value.substr(4);
      } else {
        return bad(key, "'" + value + "' is not hostPath, pvc:<claim name> or none");
      }
    } else if (key == "agent_path") {
      if (value.empty() || value[0] != '/') return bad(key, "'" + value + "' is not an absolute path");
      o.agent_path = value;
    } else if (key == "daemon_id") {
      o.daemon_id = value;
    } else if (key == "poll_ms") {
      auto ms = integer_option(key, value, 50, 60000, "a poll interval in milliseconds");
      if (!ms) return ms.status();
      o.poll_interval = std::chrono::milliseconds(*ms);
    } else if (key == "gang") {
      auto on = bool_option(key, value);
      if (!on) return on.status();
      o.gang = *on;
    } else if (key == "keep_finished_pods") {
      auto on = bool_option(key, value);
      if (!on) return on.status();
      o.keep_finished_pods = *on;
    } else if (key == "kubectl") {
      if (value.empty()) return bad(key, "an empty path");
      o.kubectl = value;
    } else {
      return api::invalid_argument("unknown --backend-opt '" + key + "' for the kubernetes backend (known: " + kKnown + ")",
                                   "backend-opt");
    }
  }

  // The connection: kubeconfig, then the explicit options over it, else in-cluster.
  const bool in_pod = in_cluster.env.count("KUBERNETES_SERVICE_HOST") > 0;
  if (kubeconfig) {
    auto k = read_kubeconfig(*kubeconfig);
    if (!k) return k.status();
    o.connection = k->connection;
    o.api_server = k->server;
    if (!k->namespace_name.empty()) o.namespace_name = k->namespace_name;
  } else if (!api_server && in_pod) {
    const std::string host = in_cluster.env.at("KUBERNETES_SERVICE_HOST");
    const auto port = in_cluster.env.count("KUBERNETES_SERVICE_PORT") ? in_cluster.env.at("KUBERNETES_SERVICE_PORT") : "443";
    const bool v6 = host.find(':') != std::string::npos;
    api_server = "https://" + (v6 ? "[" + host + "]" : host) + ":" + port;
    const fs::path sa = in_cluster.service_account_dir;
    if (!token && !token_file) token_file = (sa / "token").string();
    if (!ca_file) ca_file = (sa / "ca.crt").string();
    if (!ns) {
      if (auto n = read_file(sa / "namespace")) o.namespace_name = trim(*n);
    }
  }
  if (api_server) {
    if (auto s = parse_api_server(*api_server, &o.connection); !s) return s;
    o.api_server = *api_server;
  }
  if (o.api_server.empty()) {
    return api::invalid_argument(
        "the kubernetes backend needs the API server: --backend-opt kubeconfig=PATH, or api_server=https://HOST:PORT "
        "with token_file=... and ca_file=..., or run musterd in a pod (KUBERNETES_SERVICE_HOST)",
        "backend-opt");
  }
  if (token && token_file) return bad("token", "give token or token_file, not both");
  if (token) o.connection.token = *token;
  if (token_file) {
    auto t = read_file(*token_file);
    if (!t) return bad("token_file", *token_file + " cannot be read");
    o.connection.token = trim(*t);
  }
  if (ca_file) {
    auto ca = read_file(*ca_file);
    if (!ca) return bad("ca_file", *ca_file + " cannot be read");
    o.connection.ca_pem = *ca;
  }
  if (o.connection.token.empty() && o.connection.client_cert_pem.empty()) {
    return api::invalid_argument("the kubernetes backend has no credentials for " + o.api_server +
                                     ": give --backend-opt token_file=PATH (or token=...), or a kubeconfig with a "
                                     "token or client certificate",
                                 "token");
  }
  if (ns) o.namespace_name = *ns;
  auto dns_label = [](const std::string& s, size_t max) {
    if (s.empty() || s.size() > max) return false;
    for (char c : s) {
      if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-')) return false;
    }
    return s.front() != '-' && s.back() != '-';
  };
  if (!dns_label(o.namespace_name, 63)) {
    return bad("namespace", "'" + o.namespace_name + "' is not a namespace name (lower-case letters, digits, '-')");
  }
  if (!o.daemon_id.empty() && !dns_label(o.daemon_id, 20)) {
    return bad("daemon_id", "'" + o.daemon_id + "' must be 1-20 lower-case letters, digits or '-'");
  }
  if (o.image.empty()) {
    return api::invalid_argument(
        "the kubernetes backend needs --backend-opt image=<an image with muster-agent and the runtime>", "image");
  }
  if (o.master_address.empty()) {
    auto local = base::local_address_towards(o.connection.host, o.connection.port);
    if (local.address.empty() || local.address.rfind("127.", 0) == 0) {
      return api::invalid_argument(
          "the kubernetes backend needs --backend-opt master_address=<the address pods reach musterd at> (this "
          "host's route to the API server " + o.connection.host + " is " +
              (local.address.empty() ? std::string("unknown") : "loopback, which pods cannot reach") + ")",
          "master_address");
    }
    o.master_address = local.address;
  }
  return o;
}

}  // namespace muster::workers::kubernetes
