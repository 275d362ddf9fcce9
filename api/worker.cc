#include "api/worker.h"

#include <array>
#include <cstdio>
#include <ctime>

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

std::optional<std::chrono::system_clock::time_point> parse_rfc3339(const std::string& text) {
  std::tm tm{};
  int year = 0, month = 0, day = 0, hour = 0, minute = 0, second = 0, consumed = 0;
  if (std::sscanf(text.c_str(), "%4d-%2d-%2dT%2d:%2d:%2d%n", &year, &month, &day, &hour, &minute, &second,
                  &consumed) != 6) {
    return std::nullopt;
  }
  tm.tm_year = year - 1900;
  tm.tm_mon = month - 1;
  tm.tm_mday = day;
  tm.tm_hour = hour;
  tm.tm_min = minute;
  tm.tm_sec = second;
  const std::time_t secs = timegm(&tm);
  double fraction = 0;
  size_t pos = static_cast<size_t>(consumed);
  if (pos < text.size() && text[pos] == '.') {
    double scale = 0.1;
    for (++pos; pos < text.size() && text[pos] >= '0' && text[pos] <= '9'; ++pos, scale /= 10) {
      fraction += (text[pos] - '0') * scale;
    }
  }
  if (pos >= text.size() || text[pos] != 'Z') return std::nullopt;
  return std::chrono::system_clock::time_point(std::chrono::seconds(secs)) +
         std::chrono::duration_cast<std::chrono::system_clock::duration>(std::chrono::duration<double>(fraction));
}

std::optional<double> worker_duration(const Worker& w, std::chrono::system_clock::time_point now) {
  if (!w.running_at) return std::nullopt;
  const auto start = parse_rfc3339(*w.running_at);
  if (!start) return std::nullopt;
  std::chrono::system_clock::time_point end = now;
  if (is_terminal(w.status)) {
    const auto finished = w.finished_at ? parse_rfc3339(*w.finished_at) : std::nullopt;
    if (!finished) return std::nullopt;
    end = *finished;
  } else if (w.status != WorkerStatus::kRunning) {
    return std::nullopt;
  }
  const double seconds = std::chrono::duration<double>(end - *start).count();
  return seconds < 0 ? 0.0 : seconds;
}

nlohmann::json to_json(const Worker& w) { return to_json(w, std::chrono::system_clock::now()); }

nlohmann::json to_json(const Worker& w, std::chrono::system_clock::time_point now) {
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
      {"running_at", or_null(w.running_at)},
      {"finished_at", or_null(w.finished_at)},
      {"duration", or_null(worker_duration(w, now))},
      {"exit_code", or_null(w.exit_code)},
      {"reason", w.reason},
      {"gpu_devices", w.gpu_devices},
      {"limits", w.limits},
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
    // Records of an older daemon have no running_at: it is started_at.
    const nlohmann::json& running = j.contains("running_at") ? j.at("running_at") : j.at("started_at");
    if (!running.is_null()) w.running_at = running.get<std::string>();
    w.gpu_devices = j.value("gpu_devices", "");
    // Records of an older daemon have none.
    if (j.contains("limits")) w.limits = j.at("limits").get<std::map<std::string, std::string>>();
    if (!j.at("finished_at").is_null()) w.finished_at = j.at("finished_at").get<std::string>();
    if (!j.at("exit_code").is_null()) w.exit_code = j.at("exit_code").get<int>();
    w.reason = j.at("reason").get<std::string>();
  } catch (const nlohmann::json::exception& e) {
    return invalid_argument(std::string("bad worker record: ") + e.what());
  }
  return w;
}

Status check_script_path(const std::string& script, const std::string& field) {
  if (script.empty()) return invalid_argument(field + " is empty", field);
  const std::filesystem::path rel(script);
  if (rel.is_absolute()) {
    return invalid_argument(field + " must be a path relative to the project directory, not '" + script + "'", field);
  }
  for (const auto& part : rel) {
    if (part == "..") {
      return invalid_argument(field + " must not contain '..' (it must stay inside the project directory)", field);
    }
  }
  return Status::ok();
}

bool has_address(const Worker& w) { return !w.ip_address.empty() && w.ip_address != kUnknownAddress; }

bool is_reachable(const Worker& w) { return w.status == WorkerStatus::kRunning && has_address(w); }

}  // namespace muster::api
