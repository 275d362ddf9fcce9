#include "workers/kubernetes/pod_state.h"

#include "workers/kubernetes/pod_manifest.h"

namespace muster::workers::kubernetes {

using nlohmann::json;

namespace {

std::string str(const json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : "";
}

const json& at(const json& j, const char* key) {
  static const json kNull;
  auto it = j.find(key);
  return it == j.end() ? kNull : *it;
}

const json* condition(const json& status, const std::string& type) {
  const json& conds = at(status, "conditions");
  if (!conds.is_array()) return nullptr;
  for (const auto& c : conds) {
    if (str(c, "type") == type) return &c;
  }
  return nullptr;
}

// The agent container's status ({} when none yet).
const json& agent_status(const json& status) {
  static const json kEmpty = json::object();
  const json& list = at(status, "containerStatuses");
  if (!list.is_array()) return kEmpty;
  for (const auto& c : list) {
    if (str(c, "name") == "agent") return c;
  }
  return list.empty() ? kEmpty : list.front();
}

std::string join(const std::string& reason, const std::string& message) {
  if (message.empty()) return reason;
  if (reason.empty()) return message;
  return reason + ": " + message;
}

}  // namespace

PodView view_of(const json& pod) {
  PodView v;
  const json& meta = at(pod, "metadata");
  const json& status = at(pod, "status");
  v.name = str(meta, "name");
  v.uid = str(meta, "uid");
  v.resource_version = str(meta, "resourceVersion");
  v.worker_id = str(at(meta, "labels"), kWorkerLabel);
  v.node = str(at(pod, "spec"), "nodeName");
  v.phase = str(status, "phase");
  const json* sched = condition(status, "PodScheduled");
  v.scheduled = !v.node.empty() || (sched && str(*sched, "status") == "True");
  const json& state = at(agent_status(status), "state");
  v.container_started = state.contains("running") || state.contains("terminated");
  v.terminal = v.phase == "Succeeded" || v.phase == "Failed";
  return v;
}

ProcessStatus pod_status(const json& pod) {
  const PodView v = view_of(pod);
  const json& status = at(pod, "status");
  ProcessStatus st;
  if (v.terminal) {
    st.state = ProcessState::kExited;
    const json& terminated = at(at(agent_status(status), "state"), "terminated");
    if (terminated.contains("exitCode") && terminated["exitCode"].is_number_integer()) {
      st.exit_code = terminated["exitCode"].get<int>();
    }
    const std::string pod_reason = str(status, "reason");
    const std::string container_reason = str(terminated, "reason");
    const std::string where = " (pod " + v.name + (v.node.empty() ? "" : " on node " + v.node) + ")";
    if (container_reason == "OOMKilled") {
      std::string limit;
      for (const auto& c : at(at(pod, "spec"), "containers")) {
        limit = str(at(at(c, "resources"), "limits"), "memory");
      }
      st.reason = "OOMKilled: the pod passed its memory limit" + (limit.empty() ? "" : " (" + limit + ")") + where;
      st.outcome = api::WorkerStatus::kFailed;
    } else if (pod_reason == "NodeLost" || pod_reason == "Shutdown" || pod_reason == "Terminated") {
      st.reason = join(pod_reason, str(status, "message")) + where;
      st.outcome = api::WorkerStatus::kLost;
    } else if (!pod_reason.empty()) {  // Evicted, DeadlineExceeded, OutOfcpu, OutOfmemory, ...
      st.reason = join(pod_reason, str(status, "message")) + where;
      st.outcome = api::WorkerStatus::kFailed;
    } else if (container_reason == "DeadlineExceeded" || container_reason == "ContainerCannotRun" ||
               container_reason == "StartError") {
      st.reason = join(container_reason, str(terminated, "message")) + where;
      st.outcome = api::WorkerStatus::kFailed;
    } else {
      st.reason = "the pod " + v.name + " ended (" + v.phase + ")";
    }
    return st;
  }
  if (v.scheduled) {
    st.state = ProcessState::kRunning;
    return st;
  }
  st.state = ProcessState::kPending;
  const json* sched = condition(status, "PodScheduled");
  if (sched && str(*sched, "status") == "False") {
    st.reason = join(str(*sched, "reason"), str(*sched, "message"));
  } else {
    st.reason = "waiting for the Kubernetes scheduler (pod " + v.name + ")";
  }
  return st;
}

std::optional<std::string> node_not_ready(const json& node) {
  const json* ready = condition(at(node, "status"), "Ready");
  if (ready && str(*ready, "status") == "True") return std::nullopt;
  if (!ready) return std::string("NotReady (no Ready condition)");
  return "NotReady (" + str(*ready, "status") + ")" +
         (str(*ready, "message").empty() ? "" : ": " + str(*ready, "message"));
}

}  // namespace muster::workers::kubernetes
