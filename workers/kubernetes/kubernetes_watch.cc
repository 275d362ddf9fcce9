// KubernetesBackend: the one watch on the daemon's pods (resourceVersion kept,
// re-listed on 410 Gone) and poll(), answered from what it saw.
#include <chrono>
#include <set>
#include <mutex>
#include <string>

#include <spdlog/spdlog.h>

#include "workers/kubernetes/backend_pod.h"
#include "workers/kubernetes/pod_state.h"

namespace muster::workers::kubernetes {

using namespace std::chrono_literals;
using detail::kLabelQuery;
using detail::message_of;
using detail::since_file;

// ---- what the pods say

ProcessStatus KubernetesBackend::poll(const std::string& worker_id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = pods_.find(worker_id);
  if (it == pods_.end() || !it->second->known) return {};
  Pod& pod = *it->second;
  if (pod.final) return *pod.final;
  if (pod.held) {
    ProcessStatus st(ProcessState::kPending);
    st.reason = pod.held_reason;
    return st;
  }
  if (pod.object.is_null()) {
    if (listed_ && pod.created) {
      ProcessStatus st(ProcessState::kLost);
      st.outcome = api::WorkerStatus::kLost;
      st.reason = "the pod " + pod.name + " no longer exists (deleted while musterd was not watching)";
      pod.final = st;
      return st;
    }
    ProcessStatus st(ProcessState::kPending);
    st.reason = "the pod " + pod.name + " was created; waiting for the API server's watch";
    return st;
  }
  ProcessStatus st = pod_status(pod.object);
  if (st.state == ProcessState::kExited) {
    pod.final = st;
    return st;
  }
  const PodView v = view_of(pod.object);
  if (st.state == ProcessState::kRunning && !v.node.empty()) {
    if (auto down = not_ready_.find(v.node); down != not_ready_.end()) {
      st = ProcessStatus(ProcessState::kLost);
      st.outcome = api::WorkerStatus::kLost;
      st.reason = "node " + v.node + " is " + down->second + " (pod " + pod.name + ")";
      pod.final = st;
    }
  }
  return st;
}

void KubernetesBackend::apply_pod(const json& object) {
  const PodView v = view_of(object);
  if (v.worker_id.empty()) return;
  auto& pod = pods_[v.worker_id];
  if (!pod) pod = std::make_unique<Pod>();
  pod->worker_id = v.worker_id;
  pod->name = v.name;
  if (!pod->uid.empty() && !v.uid.empty() && pod->uid != v.uid) return;  // another pod of the same name
  pod->uid = v.uid;
  pod->object = object;
  if (pod->known && !pod->created && !pod->held) pod->created = true;
  start_log_locked(*pod);
  if (v.terminal) cv_.notify_all();  // a log thread waits for it (log_loop)
}

void KubernetesBackend::apply_deleted(const json& object) {
  const PodView v = view_of(object);
  auto it = pods_.find(v.worker_id);
  if (it == pods_.end()) return;
  Pod& pod = *it->second;
  if (!pod.uid.empty() && !v.uid.empty() && pod.uid != v.uid) return;
  pod.gone = true;
  cv_.notify_all();  // a log thread waits for it (log_loop)
  if (!object.is_null()) pod.object = object;
  if (pod.final || !pod.known) return;
  const ProcessStatus seen = pod.object.is_null() ? ProcessStatus() : pod_status(pod.object);
  if (seen.state == ProcessState::kExited) {
    pod.final = seen;
  } else if (pod.stopping) {
    ProcessStatus st(ProcessState::kExited);
    st.reason = "the pod " + pod.name + " was deleted (stopped)";
    st.outcome = api::WorkerStatus::kStopped;
    pod.final = st;
  } else {
    ProcessStatus st(ProcessState::kLost);
    st.outcome = api::WorkerStatus::kLost;
    st.reason = "the pod " + pod.name + " was deleted outside muster" + (v.node.empty() ? "" : " (on node " + v.node + ")");
    pod.final = st;
  }
}

api::Status KubernetesBackend::relist() {
  auto r = client_->request("GET", pods_path() + "?" + kLabelQuery + daemon_id_);
  if (!r) return r.status();
  if (r->status != 200) return api::unavailable("listing the daemon's pods: " + message_of(*r));
  const json list = json::parse(r->body, nullptr, false);
  if (!list.is_object() || !list.contains("items")) return api::unavailable("listing the daemon's pods: not a PodList");
  std::lock_guard<std::mutex> lock(mu_);
  std::set<std::string> present;
  for (const auto& item : list["items"]) {
    apply_pod(item);
    present.insert(view_of(item).worker_id);
  }
  for (auto& [id, pod] : pods_) {
    if (present.count(id) || pod->held || pod->gone || !pod->created || pod->object.is_null()) continue;
    apply_deleted(pod->object);  // deleted while the watch was away
  }
  resource_version_ = list.value("/metadata/resourceVersion"_json_pointer, std::string());
  listed_ = true;
  return api::Status::ok();
}

api::Status KubernetesBackend::watch_once() {
  std::string rv;
  {
    std::lock_guard<std::mutex> lock(mu_);
    rv = resource_version_;
  }
  if (rv.empty()) {
    if (auto s = relist(); !s) return s;
    std::lock_guard<std::mutex> lock(mu_);
    rv = resource_version_;
  }
  bool gone = false;
  std::string partial;
  auto s = client_->stream(
      pods_path() + "?" + kLabelQuery + daemon_id_ + "&watch=true&allowWatchBookmarks=true&timeoutSeconds=300" +
          "&resourceVersion=" + rv,
      [&](std::string_view chunk) {
        {
          std::lock_guard<std::mutex> lock(mu_);
          if (shut_down_) return false;
        }
        partial.append(chunk);
        for (size_t nl; (nl = partial.find('\n')) != std::string::npos;) {
          const json event = json::parse(partial.substr(0, nl), nullptr, false);
          partial.erase(0, nl + 1);
          if (!event.is_object()) continue;
          const std::string type = event.value("type", "");
          const json& object = event.contains("object") ? event["object"] : json();
          if (type == "ERROR") {
            if (object.is_object() && object.value("code", 0) == 410) gone = true;
            else spdlog::warn("kubernetes: the pod watch reported an error: {}", object.dump());
            return false;
          }
          std::lock_guard<std::mutex> lock(mu_);
          const std::string v = object.value("/metadata/resourceVersion"_json_pointer, std::string());
          if (!v.empty()) resource_version_ = v;
          if (type == "ADDED" || type == "MODIFIED") apply_pod(object);
          if (type == "DELETED") apply_deleted(object);
        }
        return true;
      });
  if (gone) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      resource_version_.clear();
    }
    return relist();
  }
  return s;
}

void KubernetesBackend::watch_loop() {
  auto backoff = 500ms;
  std::string last_error;
  for (;;) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (shut_down_) return;
    }
    auto s = watch_once();
    std::unique_lock<std::mutex> lock(mu_);
    if (shut_down_) return;
    if (s) {
      backoff = 500ms;
      if (!last_error.empty()) spdlog::info("kubernetes: the pod watch is back");
      last_error.clear();
      continue;
    }
    if (s.message() != last_error) spdlog::warn("kubernetes: the pod watch failed ({}); retrying", s.message());
    last_error = s.message();
    cv_.wait_for(lock, backoff, [this] { return shut_down_; });
    backoff = std::min<std::chrono::milliseconds>(backoff * 2, 10s);
  }
}

}  // namespace muster::workers::kubernetes
