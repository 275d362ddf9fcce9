#include "muster/api/worker.h"

#include <array>

namespace muster::api {

namespace {
constexpr std::array<std::pair<WorkerStatus, const char*>, 8> kNames = {{
    {WorkerStatus::kScheduling, "scheduling"},
    {WorkerStatus::kStarting, "starting"},
    {WorkerStatus::kRunning, "running"},
    {WorkerStatus::kSucceeded, "succeeded"},
    {WorkerStatus::kFailed, "failed"},
    {WorkerStatus::kTimedOut, "timedout"},
    {WorkerStatus::kStopped, "stopped"},
    {WorkerStatus::kLost, "lost"},
}};

template <typename T>
nlohmann::json or_null(const std::optional<T>& v) {
  return v ? nlohmann::json(*v) : nlohmann::json(nullptr);
}
}  // namespace

const char* worker_status_name(WorkerStatus status) {
  for (const auto& [s, name] : kNames) {
    if (s == status) return name;
  }
  return "unknown";
}

std::optional<WorkerStatus> parse_worker_status(std::string_view name) {
  for (const auto& [s, n] : kNames) {
    if (name == n) return s;
  }
  return std::nullopt;
}

bool is_terminal(WorkerStatus status) {
  switch (status) {
    case WorkerStatus::kScheduling:
    case WorkerStatus::kStarting:
    case WorkerStatus::kRunning:
      return false;
    default:
      return true;
  }
}

bool can_transition(WorkerStatus from, WorkerStatus to) {
  using S = WorkerStatus;
  switch (from) {
    case S::kScheduling:
      return to == S::kStarting || to == S::kFailed || to == S::kStopped;
    case S::kStarting:
      return to == S::kRunning || to == S::kFailed || to == S::kTimedOut || to == S::kStopped ||
             to == S::kLost;
    case S::kRunning:
      return to == S::kSucceeded || to == S::kFailed || to == S::kStopped || to == S::kLost;
    default:
      return false;  // terminal
  }
}

nlohmann::json to_json(const Worker& w) {
  return {
      {"id", w.id},
      {"status", worker_status_name(w.status)},
      {"ip_address", w.ip_address},
      {"port", or_null(w.port)},
      {"cpu", w.cpu},
      {"memory", w.memory},
      {"nvidia_gpu", w.nvidia_gpu},
      {"kernel", w.kernel},
      {"script", w.script},
      {"cluster_id", or_null(w.cluster_id)},
      {"created_at", w.created_at},
      {"started_at", or_null(w.started_at)},
      {"finished_at", or_null(w.finished_at)},
      {"exit_code", or_null(w.exit_code)},
      {"reason", w.reason},
  };
}

Result<Worker> worker_from_json(const nlohmann::json& j) {
  if (!j.is_object()) return invalid_argument("worker record is not an object");
  Worker w;
  try {
    w.id = j.at("id").get<std::string>();
    auto status = parse_worker_status(j.at("status").get<std::string>());
    if (!status) return invalid_argument("unknown worker status", "status");
    w.status = *status;
    w.ip_address = j.at("ip_address").get<std::string>();
    if (!j.at("port").is_null()) w.port = j.at("port").get<int>();
    w.cpu = j.at("cpu").get<double>();
    w.memory = j.at("memory").get<double>();
    w.nvidia_gpu = j.at("nvidia_gpu").get<int>();
    w.kernel = j.at("kernel").get<std::string>();
    w.script = j.at("script").get<std::string>();
    if (!j.at("cluster_id").is_null()) w.cluster_id = j.at("cluster_id").get<std::string>();
    w.created_at = j.at("created_at").get<std::string>();
    if (!j.at("started_at").is_null()) w.started_at = j.at("started_at").get<std::string>();
    if (!j.at("finished_at").is_null()) w.finished_at = j.at("finished_at").get<std::string>();
    if (!j.at("exit_code").is_null()) w.exit_code = j.at("exit_code").get<int>();
    w.reason = j.at("reason").get<std::string>();
  } catch (const nlohmann::json::exception& e) {
    return invalid_argument(std::string("bad worker record: ") + e.what());
  }
  return w;
}

}  // namespace muster::api
