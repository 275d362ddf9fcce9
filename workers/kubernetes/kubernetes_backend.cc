#include "workers/kubernetes/kubernetes_backend.h"

#include <atomic>
#include <cmath>
#include <fstream>
#include <random>
#include <set>
#include <sstream>

#include <spdlog/spdlog.h>

#include "api/base/atomic_file.h"
#include "api/base/rotating_log.h"
#include "clusterspec/rendezvous_protocol.h"
#include "workers/kubernetes/backend_pod.h"
#include "workers/kubernetes/pod_log.h"
#include "workers/kubernetes/pod_manifest.h"
#include "workers/kubernetes/pod_state.h"

namespace muster::workers::kubernetes {

namespace fs = std::filesystem;
using nlohmann::json;
using namespace std::chrono_literals;

namespace {

api::Result<std::string> daemon_id_in(const fs::path& state_dir) {
  const fs::path file = state_dir / "kubernetes" / "daemon-id";
  std::ifstream in(file);
  std::string id;
  if (in && std::getline(in, id) && !id.empty()) return id;
  std::random_device rd;
  std::ostringstream hex;
  hex << std::hex;
  for (int i = 0; i < 8; ++i) hex << (rd() % 16);
  id = hex.str();
  std::error_code ec;
  fs::create_directories(file.parent_path(), ec);
  if (auto err = base::write_file_atomically(file, id + "\n")) {
    return api::internal_error("cannot keep the daemon id in " + file.string() + ": " + *err);
  }
  return id;
}

}  // namespace

using detail::kLabelQuery;
using detail::message_of;
using detail::since_file;

api::Result<std::unique_ptr<KubernetesBackend>> KubernetesBackend::create(KubernetesOptions options,
                                                                          std::unique_ptr<ApiClient> client) {
  std::unique_ptr<KubernetesBackend> b(new KubernetesBackend(std::move(options), std::move(client)));
  if (b->options_.daemon_id.empty()) {
    auto id = daemon_id_in(b->options_.state_dir);
    if (!id) return id.status();
    b->daemon_id_ = *id;
  } else {
    b->daemon_id_ = b->options_.daemon_id;
  }
  std::error_code ec;
  fs::create_directories(b->options_.state_dir / "kubernetes" / "logs", ec);
  // Reach the API server once now, so that a wrong URL, CA or token stops
  // musterd at its start with the reason instead of failing every launch.
  auto probe = b->client_->request("GET", b->pods_path() + "?limit=1&" + kLabelQuery + b->daemon_id_);
  if (!probe) return api::unavailable(probe.status().message());
  if (probe->status != 200) {
    return api::unavailable("the Kubernetes API server " + b->options_.api_server + " refused to list pods in namespace " +
                            b->options_.namespace_name + " (" + message_of(*probe) +
                            "); musterd needs the Role docs/KUBERNETES.md lists");
  }
  if (b->options_.start_threads) {
    b->watcher_ = std::thread([p = b.get()] { p->watch_loop(); });
    b->housekeeper_ = std::thread([p = b.get()] { p->housekeeping_loop(); });
  }
  return b;
}

KubernetesBackend::KubernetesBackend(KubernetesOptions options, std::unique_ptr<ApiClient> client)
    : options_(std::move(options)), client_(std::move(client)) {}

KubernetesBackend::~KubernetesBackend() { shutdown(); }

std::string KubernetesBackend::pods_path() const { return "/api/v1/namespaces/" + options_.namespace_name + "/pods"; }

// ---- launch and stop

api::Status KubernetesBackend::launch(const std::vector<LaunchSpec>& specs) {
  // Gangs: the specs of one cluster; every other spec is a group of one.
  std::vector<std::vector<LaunchSpec>> groups;
  std::map<std::string, size_t> by_cluster;
  for (const auto& spec : specs) {
    auto cluster = spec.env.find(clusterspec::rendezvous::kEnvClusterId);
    if (!options_.gang || cluster == spec.env.end() || cluster->second.empty()) {
      groups.push_back({spec});
      continue;
    }
    auto [it, fresh] = by_cluster.emplace(cluster->second, groups.size());
    if (fresh) groups.emplace_back();
    groups[it->second].push_back(spec);
  }
  std::vector<LaunchSpec> now;
  std::vector<Gang> wait;
  for (auto& group : groups) {
    std::string reason;
    if (group.size() == 1 || fit_now(group, &reason)) {
      for (auto& s : group) now.push_back(std::move(s));
    } else {
      wait.push_back(Gang{std::move(group), reason});
    }
  }
  if (auto s = create_pods(now); !s) return s;
  if (!wait.empty()) {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& gang : wait) {
      for (const auto& spec : gang.specs) {
        auto& pod = pods_[spec.worker_id];
        if (!pod) pod = std::make_unique<Pod>();
        pod->worker_id = spec.worker_id;
        pod->name = pod_name(daemon_id_, spec.worker_id);
        pod->known = true;
        pod->held = true;
        pod->held_reason = gang.reason;
      }
      spdlog::info("kubernetes: holding a gang of {} pod(s) until all fit ({})", gang.specs.size(), gang.reason);
      held_.push_back(std::move(gang));
    }
    cv_.notify_all();
  }
  return api::Status::ok();
}

// Step by step: a) per worker, the Secret, then the Pod (the kubelet waits
// for the Secret, so the pod never starts without its token); b) on the
// first refusal, every Secret and Pod this call created is deleted (grace
// 0) and the error names the worker; c) the pods are recorded under the
// mutex, with what the create answered as their first state.
api::Status KubernetesBackend::create_pods(const std::vector<LaunchSpec>& specs) {
  std::vector<std::string> made;  // workers with a Secret (and maybe a Pod), for an undo
  std::vector<std::string> pods;
  std::vector<json> created;
  auto undo = [&](const std::string& why) {
    for (const auto& id : made) delete_pod(id, 0);
    return api::unavailable(why);
  };
  for (const auto& spec : specs) {
    const json secret = secret_manifest(spec, options_, daemon_id_);
    auto r = client_->request("POST", "/api/v1/namespaces/" + options_.namespace_name + "/secrets", secret.dump());
    if (!r) return undo("worker " + spec.worker_id + ": " + r.status().message());
    if (r->status != 201) {
      return undo("worker " + spec.worker_id + ": the API server refused its Secret (" + message_of(*r) + ")");
    }
    made.push_back(spec.worker_id);
    const json pod = pod_manifest(spec, options_, daemon_id_);
    r = client_->request("POST", pods_path(), pod.dump());
    if (!r) return undo("worker " + spec.worker_id + ": " + r.status().message());
    if (r->status != 201) {
      return undo("worker " + spec.worker_id + ": the API server refused its pod (" + message_of(*r) + ")");
    }
    pods.push_back(pod_name(daemon_id_, spec.worker_id));
    json answer = json::parse(r->body, nullptr, false);
    created.push_back(answer.is_object() ? answer : json());
  }
  std::lock_guard<std::mutex> lock(mu_);
  for (size_t i = 0; i < specs.size(); ++i) {
    auto& pod = pods_[specs[i].worker_id];
    if (!pod) pod = std::make_unique<Pod>();
    pod->worker_id = specs[i].worker_id;
    pod->name = pods[i];
    pod->known = pod->created = true;
    pod->held = false;
    pod->log_path = specs[i].log_path;
    pod->log_limits = specs[i].log_limits;
    if (pod->object.is_null() && !created[i].is_null()) {
      pod->object = created[i];
      pod->uid = view_of(created[i]).uid;
    }
    start_log_locked(*pod);
  }
  return api::Status::ok();
}

api::Status KubernetesBackend::stop(const std::string& worker_id, std::chrono::milliseconds grace) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = pods_.find(worker_id);
    if (it == pods_.end()) return api::Status::ok();
    Pod& pod = *it->second;
    if (pod.held) {
      for (auto g = held_.begin(); g != held_.end(); ++g) {
        auto& s = g->specs;
        s.erase(std::remove_if(s.begin(), s.end(), [&](const LaunchSpec& x) { return x.worker_id == worker_id; }),
                s.end());
        if (s.empty()) {
          held_.erase(g);
          break;
        }
      }
      pod.held = false;
      ProcessStatus st(ProcessState::kExited);
      st.outcome = api::WorkerStatus::kStopped;
      st.reason = "stopped while its gang waited to fit";
      pod.final = st;
      return api::Status::ok();
    }
    if (pod.stopping || pod.gone || pod.cleaned || !pod.created) return api::Status::ok();
    pod.stopping = true;
  }
  const long seconds = std::max(0L, static_cast<long>(std::ceil(grace.count() / 1000.0)));
  auto r = client_->request("DELETE", pods_path() + "/" + pod_name(daemon_id_, worker_id) +
                                          "?gracePeriodSeconds=" + std::to_string(seconds));
  if (r && (r->status == 200 || r->status == 202 || r->status == 404)) return api::Status::ok();
  std::lock_guard<std::mutex> lock(mu_);
  if (auto it = pods_.find(worker_id); it != pods_.end()) it->second->stopping = false;
  return api::unavailable("worker " + worker_id + ": the pod could not be deleted (" +
                          (r ? message_of(*r) : r.status().message()) + ")");
}

void KubernetesBackend::delete_pod(const std::string& worker_id, std::optional<long> grace_seconds) {
  std::string path = pods_path() + "/" + pod_name(daemon_id_, worker_id);
  if (grace_seconds) path += "?gracePeriodSeconds=" + std::to_string(*grace_seconds);
  auto r = client_->request("DELETE", path);
  if (!r || (r->status != 200 && r->status != 202 && r->status != 404)) {
    spdlog::warn("kubernetes: the pod of worker {} could not be deleted: {}", worker_id,
                 r ? message_of(*r) : r.status().message());
  }
  r = client_->request("DELETE", "/api/v1/namespaces/" + options_.namespace_name + "/secrets/" +
                                     secret_name(daemon_id_, worker_id));
  if (!r || (r->status != 200 && r->status != 202 && r->status != 404)) {
    spdlog::warn("kubernetes: the Secret of worker {} could not be deleted: {}", worker_id,
                 r ? message_of(*r) : r.status().message());
  }
}

// ---- housekeeping: nodes, held gangs, finished pods

bool KubernetesBackend::fit_now(const std::vector<LaunchSpec>& specs, std::string* reason) {
  auto nodes = client_->request("GET", "/api/v1/nodes");
  const std::string running = "fieldSelector=status.phase%21%3DSucceeded%2Cstatus.phase%21%3DFailed";
  auto pods = client_->request("GET", "/api/v1/pods?" + running);
  if (pods && pods->status == 403) pods = client_->request("GET", pods_path() + "?" + running);  // this namespace's only
  if (!nodes || nodes->status != 200 || !pods || pods->status != 200) {
    const std::string why = !nodes ? nodes.status().message()
                            : nodes->status != 200 ? "listing nodes: " + message_of(*nodes)
                            : !pods ? pods.status().message()
                                    : "listing pods: " + message_of(*pods);
    *reason = "waiting for the whole group of " + std::to_string(specs.size()) +
              " to fit, but the nodes' room cannot be read (" + why +
              "); musterd needs `list` on nodes and pods (docs/KUBERNETES.md), or --backend-opt gang=false";
    return false;
  }
  const json node_list = json::parse(nodes->body, nullptr, false);
  const json pod_list = json::parse(pods->body, nullptr, false);
  const auto room = free_room(node_list.is_object() ? node_list : json::object(),
                              pod_list.is_object() ? pod_list : json::object());
  std::vector<Resources> asks;
  for (const auto& spec : specs) asks.push_back(pod_requests(pod_manifest(spec, options_, daemon_id_)));
  if (fits(asks, room)) return true;
  *reason = describe_wait(asks, room);
  return false;
}

void KubernetesBackend::housekeeping() {
  // Nodes: which are not Ready.
  auto nodes = client_->request("GET", "/api/v1/nodes");
  if (nodes && nodes->status == 200) {
    const json list = json::parse(nodes->body, nullptr, false);
    std::map<std::string, std::string> down;
    if (list.is_object()) {
      for (const auto& node : list.value("items", json::array())) {
        if (auto why = node_not_ready(node)) down[node.value("/metadata/name"_json_pointer, std::string())] = *why;
      }
    }
    std::lock_guard<std::mutex> lock(mu_);
    not_ready_ = std::move(down);
  }
  // Held gangs, in launch order: each that fits now is created whole.
  std::vector<Gang> gangs;
  {
    std::lock_guard<std::mutex> lock(mu_);
    gangs = held_;
  }
  for (const auto& gang : gangs) {
    std::string reason;
    const bool fit = fit_now(gang.specs, &reason);
    std::vector<std::string> ids;
    for (const auto& s : gang.specs) ids.push_back(s.worker_id);
    {
      std::lock_guard<std::mutex> lock(mu_);
      // Still held as it was (a stop may have taken a worker out meanwhile)?
      auto it = std::find_if(held_.begin(), held_.end(), [&](const Gang& g) {
        return g.specs.size() == ids.size() && g.specs.front().worker_id == ids.front();
      });
      if (it == held_.end()) continue;
      if (!fit) {
        it->reason = reason;
        for (const auto& id : ids) {
          if (auto p = pods_.find(id); p != pods_.end()) p->second->held_reason = reason;
        }
        continue;
      }
      held_.erase(it);
    }
    spdlog::info("kubernetes: a gang of {} pod(s) fits now; creating it", ids.size());
    if (auto s = create_pods(gang.specs); !s) {
      std::lock_guard<std::mutex> lock(mu_);
      for (const auto& id : ids) {
        auto p = pods_.find(id);
        if (p == pods_.end()) continue;
        p->second->held = false;
        ProcessStatus st(ProcessState::kExited);
        st.outcome = api::WorkerStatus::kFailed;
        st.reason = "its gang could not be created: " + s.message();
        p->second->final = st;
      }
    }
  }
  // Pods that ended and whose log is read: deleted (logs stay with the daemon).
  std::vector<std::string> to_delete;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [id, pod] : pods_) {
      if (!pod->known || pod->cleaned) continue;
      const bool ended = !pod->object.is_null() && view_of(pod->object).terminal;
      const bool gone_with_secret = pod->gone;
      if (gone_with_secret || (ended && pod->log_done && !options_.keep_finished_pods)) {
        pod->cleaned = true;
        to_delete.push_back(id);
      }
    }
  }
  for (const auto& id : to_delete) delete_pod(id, 0);
}

// ---- threads

void KubernetesBackend::housekeeping_loop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!shut_down_) {
    lock.unlock();
    housekeeping();
    lock.lock();
    cv_.wait_for(lock, options_.poll_interval, [this] { return shut_down_; });
  }
}

// ---- identity, adoption, forgetting, shutdown

std::string KubernetesBackend::process_identity(const std::string& worker_id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = pods_.find(worker_id);
  if (it == pods_.end() || !it->second->created) return "";
  const Pod& pod = *it->second;
  return json{{"pod", pod.name},
              {"uid", pod.uid},
              {"log", pod.log_path.string()},
              {"max_bytes", pod.log_limits.max_bytes},
              {"keep", pod.log_limits.keep}}
      .dump();
}

void KubernetesBackend::adopt(const std::string& worker_id, const std::string& identity) {
  const json id = json::parse(identity, nullptr, false);
  if (!id.is_object()) {
    spdlog::warn("kubernetes: worker {} has no pod identity this backend reads ({})", worker_id, identity);
    return;
  }
  std::string resume;
  if (std::ifstream in(since_file(options_.state_dir, worker_id)); in) std::getline(in, resume);
  std::lock_guard<std::mutex> lock(mu_);
  auto& pod = pods_[worker_id];
  if (!pod) pod = std::make_unique<Pod>();
  pod->worker_id = worker_id;
  pod->name = id.value("pod", pod_name(daemon_id_, worker_id));
  const std::string uid = id.value("uid", "");
  if (!pod->uid.empty() && !uid.empty() && pod->uid != uid) pod->object = json();  // not the pod we made
  if (pod->uid.empty()) pod->uid = uid;
  pod->known = pod->created = true;
  pod->log_path = id.value("log", "");
  pod->log_limits.max_bytes = id.value("max_bytes", pod->log_limits.max_bytes);
  pod->log_limits.keep = id.value("keep", pod->log_limits.keep);
  pod->cursor.resume_after = normalize_log_time(resume);
  start_log_locked(*pod);
}

void KubernetesBackend::forget(const std::string& worker_id) {
  std::thread log_thread;
  bool delete_it = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = pods_.find(worker_id);
    if (it == pods_.end()) return;
    delete_it = it->second->created && !it->second->cleaned;
    auto t = log_threads_.find(worker_id);
    if (t != log_threads_.end()) {
      log_thread = std::move(t->second);
      log_threads_.erase(t);
    }
    it->second->log_done = true;
  }
  if (delete_it) delete_pod(worker_id, 0);  // the stream ends with the pod
  if (log_thread.joinable()) log_thread.join();
  std::lock_guard<std::mutex> lock(mu_);
  pods_.erase(worker_id);
  std::error_code ec;
  fs::remove(since_file(options_.state_dir, worker_id), ec);
}

void KubernetesBackend::shutdown() {
  std::map<std::string, std::thread> logs;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (shut_down_) return;
    shut_down_ = true;
    logs = std::move(log_threads_);
  }
  cv_.notify_all();
  if (watcher_.joinable()) watcher_.join();
  if (housekeeper_.joinable()) housekeeper_.join();
  for (auto& [id, t] : logs) {
    if (t.joinable()) t.join();
  }
  // The pods stay: a restarted daemon adopts them (kubernetes_backend.h).
}

}  // namespace muster::workers::kubernetes
