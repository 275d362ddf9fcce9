#include "service/cluster_types.h"

#include <algorithm>
#include <cmath>
#include <set>

#include "api/json_integer.h"
#include "clusterspec/names.h"
#include "clusterspec/shell.h"
#include "service/validation.h"

namespace muster::service {

using nlohmann::json;

namespace {

constexpr int kMaxSlots = 1024;

api::Status bad(const std::string& field, const std::string& message) {
  return api::invalid_argument(field + " " + message, field);
}

bool has_nul(const std::string& s) { return s.find('\0') != std::string::npos; }

api::Status read_int(const json& body, const char* field, int lo, int hi, int* out) {
  auto it = body.find(field);
  if (it == body.end() || it->is_null()) return api::Status::ok();
  const auto n = api::json_integer(*it);
  if (!n) return bad(field, "must be an integer");
  const long long v = *n;
  if (v < lo || v > hi) return bad(field, "must be in " + std::to_string(lo) + ".." + std::to_string(hi) + ", got " + std::to_string(v));
  *out = static_cast<int>(v);
  return api::Status::ok();
}

api::Status read_optional_int(const json& body, const char* field, int lo, int hi, std::optional<int>* out) {
  auto it = body.find(field);
  if (it == body.end() || it->is_null()) return api::Status::ok();
  int v = 0;
  if (auto s = read_int(body, field, lo, hi, &v); !s) return s;
  *out = v;
  return api::Status::ok();
}

api::Status read_number(const json& body, const char* field, bool allow_zero, double* out) {
  auto it = body.find(field);
  if (it == body.end() || it->is_null()) return api::Status::ok();
  if (!it->is_number()) return bad(field, "must be a number");
  double v = it->get<double>();
  if (!std::isfinite(v) || v < 0 || (!allow_zero && v == 0)) {
    return bad(field, allow_zero ? "must be a number >= 0" : "must be greater than 0");
  }
  *out = v;
  return api::Status::ok();
}

api::Status read_string(const json& body, const char* field, std::string* out) {
  auto it = body.find(field);
  if (it == body.end() || it->is_null()) return api::Status::ok();
  if (!it->is_string()) return bad(field, "must be a string");
  *out = it->get<std::string>();
  if (has_nul(*out)) return bad(field, "must not contain NUL characters");
  return api::Status::ok();
}

api::Status read_bool(const json& body, const char* field, bool* out) {
  auto it = body.find(field);
  if (it == body.end() || it->is_null()) return api::Status::ok();
  if (!it->is_boolean()) return bad(field, "must be true or false");
  *out = it->get<bool>();
  return api::Status::ok();
}

}  // namespace

const char* cluster_status_name(ClusterStatus s) {
  switch (s) {
    case ClusterStatus::kStarting: return "starting";
    case ClusterStatus::kRunning: return "running";
    case ClusterStatus::kSucceeded: return "succeeded";
    case ClusterStatus::kFailed: return "failed";
    case ClusterStatus::kStopped: return "stopped";
  }
  return "unknown";
}

std::optional<ClusterStatus> parse_cluster_status(const std::string& name) {
  for (auto s : {ClusterStatus::kStarting, ClusterStatus::kRunning, ClusterStatus::kSucceeded, ClusterStatus::kFailed,
                 ClusterStatus::kStopped}) {
    if (name == cluster_status_name(s)) return s;
  }
  return std::nullopt;
}

bool is_terminal(ClusterStatus s) {
  return s == ClusterStatus::kSucceeded || s == ClusterStatus::kFailed || s == ClusterStatus::kStopped;
}

const char* cluster_mode_name(ClusterMode mode) { return mode == ClusterMode::kPs ? "ps" : "mpi"; }

api::Result<ClusterRequest> parse_cluster_request(const json& body, int max_workers) {
  static const std::set<std::string> kFields = {
      "mode", "n_workers", "n_ps", "cpu", "memory", "nvidia_gpu", "worker_script", "args", "env", "ps_script",
      "slots", "ssh_port", "network_interface", "network_interfaces", "timeout_seconds", "launch",
      "fusion_threshold_mb", "cycle_time_ms", "timeline_filename", "start_timeout", "verbose", "n_chief",
      "n_evaluator"};
  if (!body.is_object()) return api::invalid_argument("the request body must be a JSON object");
  for (const auto& item : body.items()) {
    if (!kFields.count(item.key())) return api::invalid_argument("unknown field '" + item.key() + "'", item.key());
  }
  ClusterRequest r;
  std::string mode = "ps";
  if (auto s = read_string(body, "mode", &mode); !s) return s;
  if (mode == "ps") {
    r.mode = ClusterMode::kPs;
  } else if (mode == "mpi") {
    r.mode = ClusterMode::kMpi;
  } else {
    return bad("mode", "must be \"ps\" or \"mpi\"");
  }
  if (!body.contains("n_workers") || body["n_workers"].is_null()) return bad("n_workers", "is required");
  if (auto s = read_int(body, "n_workers", 1, max_workers, &r.n_workers); !s) return s;
  // At least one worker task comes beside the PS tasks.
  if (auto s = read_int(body, "n_ps", 0, max_workers - 1, &r.n_ps); !s) return s;
  if (r.mode == ClusterMode::kMpi && r.n_ps != 0) return bad("n_ps", "is for ps mode only (mpi mode has no parameter servers)");
  if (auto s = read_int(body, "n_chief", 0, 1, &r.n_chief); !s) return s;
  if (auto s = read_int(body, "n_evaluator", 0, 1, &r.n_evaluator); !s) return s;
  if (r.mode == ClusterMode::kMpi && r.n_chief != 0) return bad("n_chief", "is for ps mode only (TensorFlow's chief task)");
  if (r.mode == ClusterMode::kMpi && r.n_evaluator != 0) {
    return bad("n_evaluator", "is for ps mode only (TensorFlow's evaluator task)");
  }
  const int total = r.n_workers + r.n_ps + r.n_chief + r.n_evaluator;
  if (total > max_workers) {
    return bad("n_workers", "+ n_ps + n_chief + n_evaluator is " + std::to_string(total) + ", more than the " +
                                std::to_string(max_workers) + " workers this daemon allows");
  }
  if (auto s = read_number(body, "cpu", false, &r.cpu); !s) return s;
  if (auto s = read_number(body, "memory", false, &r.memory); !s) return s;
  if (auto s = read_int(body, "nvidia_gpu", 0, 64, &r.nvidia_gpu); !s) return s;
  if (auto s = read_string(body, "worker_script", &r.worker_script); !s) return s;
  if (auto s = read_string(body, "ps_script", &r.ps_script); !s) return s;
  // Checked here too, since without PS tasks ps_script is never launched.
  for (const auto& [field, script] : {std::pair<const char*, const std::string*>{"worker_script", &r.worker_script},
                                      {"ps_script", &r.ps_script}}) {
    if (script->empty()) continue;
    if (auto s = check_script_path(*script, field); !s) return s;
  }
  if (r.mode == ClusterMode::kMpi && !r.ps_script.empty()) return bad("ps_script", "is for ps mode only");
  if (r.mode == ClusterMode::kMpi && r.worker_script.empty()) {
    return bad("worker_script", "is required in mpi mode: it is the program every rank runs");
  }
  if (auto it = body.find("args"); it != body.end() && !it->is_null()) {
    if (!it->is_array()) return bad("args", "must be a list of strings");
    for (const auto& a : *it) {
      if (!a.is_string()) return bad("args", "must be a list of strings");
      if (has_nul(a.get<std::string>())) return bad("args", "must not contain NUL characters");
      r.args.push_back(a.get<std::string>());
    }
  }
  if (auto it = body.find("env"); it != body.end() && !it->is_null()) {
    if (!it->is_object()) return bad("env", "must be an object of NAME: value strings");
    for (const auto& item : it->items()) {
      if (!clusterspec::is_valid_env_name(item.key())) {
        return api::invalid_argument("env name " + clusterspec::quoted(item.key()) + " must match [A-Za-z_][A-Za-z0-9_]*", "env");
      }
      if (!item.value().is_string()) return api::invalid_argument("env." + item.key() + " must be a string", "env");
      if (has_nul(item.value().get<std::string>())) return api::invalid_argument("env." + item.key() + " must not contain NUL characters", "env");
      r.env[item.key()] = item.value().get<std::string>();
    }
  }
  if (auto s = read_int(body, "slots", 1, kMaxSlots, &r.slots); !s) return s;
  if (auto s = read_int(body, "ssh_port", 1, 65535, &r.ssh_port); !s) return s;
  std::string one_interface;
  if (auto s = read_string(body, "network_interface", &one_interface); !s) return s;
  if (!one_interface.empty() && !clusterspec::is_valid_interface(one_interface)) {
    return bad("network_interface", clusterspec::quoted(one_interface) + " is not an interface name ([A-Za-z0-9._-], at most 15 characters)");
  }
  if (auto it = body.find("network_interfaces"); it != body.end() && !it->is_null()) {
    if (!one_interface.empty()) return bad("network_interfaces", "and network_interface: give one of them");
    if (!it->is_array()) return bad("network_interfaces", "must be a list of interface names");
    for (const auto& name : *it) {
      if (!name.is_string() || !clusterspec::is_valid_interface(name.get<std::string>())) {
        return bad("network_interfaces", (name.is_string() ? clusterspec::quoted(name.get<std::string>()) : name.dump()) +
                                             " is not an interface name ([A-Za-z0-9._-], at most 15 characters)");
      }
      r.network_interfaces.push_back(name.get<std::string>());
    }
  } else if (!one_interface.empty()) {
    r.network_interfaces.push_back(one_interface);
  }
  if (auto s = read_optional_int(body, "fusion_threshold_mb", 0, 1 << 20, &r.fusion_threshold_mb); !s) return s;
  if (body.contains("cycle_time_ms") && !body["cycle_time_ms"].is_null()) {
    double v = 0;
    if (auto s = read_number(body, "cycle_time_ms", false, &v); !s) return s;
    r.cycle_time_ms = v;
  }
  if (auto s = read_string(body, "timeline_filename", &r.timeline_filename); !s) return s;
  if (!r.timeline_filename.empty() && r.timeline_filename[0] == '-') {
    return bad("timeline_filename", "must not start with '-' (it would read as an option)");
  }
  if (auto s = read_optional_int(body, "start_timeout", 1, 86400, &r.start_timeout); !s) return s;
  if (auto s = read_bool(body, "verbose", &r.verbose); !s) return s;
  if (r.mode == ClusterMode::kPs) {
    for (const char* field : {"network_interface", "network_interfaces", "fusion_threshold_mb", "cycle_time_ms",
                              "timeline_filename", "start_timeout", "verbose"}) {
      if (body.contains(field) && !body[field].is_null()) return bad(field, "is a horovodrun option, for mpi mode only");
    }
  }
  if (auto s = read_number(body, "timeout_seconds", true, &r.timeout_seconds); !s) return s;
  if (auto s = read_bool(body, "launch", &r.launch); !s) return s;
  if (r.mode == ClusterMode::kPs && body.contains("launch") && !body["launch"].is_null() && !r.launch) {
    return bad("launch", "is for mpi mode only (ps-mode tasks always start once released)");
  }
  return r;
}

json ClusterRequest::to_json() const {
  return json{{"mode", cluster_mode_name(mode)},
              {"n_workers", n_workers},
              {"n_ps", n_ps},
              {"cpu", cpu},
              {"memory", memory},
              {"nvidia_gpu", nvidia_gpu},
              {"worker_script", worker_script},
              {"args", args},
              {"env", env},
              {"ps_script", ps_script},
              {"slots", slots},
              {"ssh_port", ssh_port},
              {"network_interfaces", network_interfaces},
              {"timeout_seconds", timeout_seconds},
              {"launch", launch},
              {"fusion_threshold_mb", fusion_threshold_mb ? json(*fusion_threshold_mb) : json(nullptr)},
              {"cycle_time_ms", cycle_time_ms ? json(*cycle_time_ms) : json(nullptr)},
              {"timeline_filename", timeline_filename},
              {"start_timeout", start_timeout ? json(*start_timeout) : json(nullptr)},
              {"verbose", verbose},
              {"n_chief", n_chief},
              {"n_evaluator", n_evaluator}};
}

api::Result<ClusterRequest> cluster_request_from_json(const json& j) {
  try {
    ClusterRequest r;
    r.mode = j.at("mode").get<std::string>() == "mpi" ? ClusterMode::kMpi : ClusterMode::kPs;
    r.n_workers = j.at("n_workers").get<int>();
    r.n_ps = j.at("n_ps").get<int>();
    r.cpu = j.at("cpu").get<double>();
    r.memory = j.at("memory").get<double>();
    r.nvidia_gpu = j.at("nvidia_gpu").get<int>();
    r.worker_script = j.at("worker_script").get<std::string>();
    r.args = j.at("args").get<std::vector<std::string>>();
    r.env = j.at("env").get<std::map<std::string, std::string>>();
    r.ps_script = j.at("ps_script").get<std::string>();
    r.slots = j.at("slots").get<int>();
    r.ssh_port = j.at("ssh_port").get<int>();
    if (j.contains("network_interfaces")) {
      r.network_interfaces = j.at("network_interfaces").get<std::vector<std::string>>();
    } else if (!j.value("network_interface", "").empty()) {
      r.network_interfaces = {j.at("network_interface").get<std::string>()};  // an older daemon's record
    }
    r.timeout_seconds = j.at("timeout_seconds").get<double>();
    r.launch = j.at("launch").get<bool>();
    if (j.contains("fusion_threshold_mb") && !j["fusion_threshold_mb"].is_null()) {
      r.fusion_threshold_mb = j["fusion_threshold_mb"].get<int>();
    }
    if (j.contains("cycle_time_ms") && !j["cycle_time_ms"].is_null()) r.cycle_time_ms = j["cycle_time_ms"].get<double>();
    r.timeline_filename = j.value("timeline_filename", "");
    if (j.contains("start_timeout") && !j["start_timeout"].is_null()) r.start_timeout = j["start_timeout"].get<int>();
    r.verbose = j.value("verbose", false);
    r.n_chief = j.value("n_chief", 0);
    r.n_evaluator = j.value("n_evaluator", 0);
    return r;
  } catch (const json::exception& e) {
    return api::internal_error(std::string("stored cluster request is malformed: ") + e.what());
  }
}

json Cluster::workers_json() const {
  json out = json::object();
  for (const auto& t : tasks) {
    if (!out.contains(t.type)) out[t.type] = json::array();
    out[t.type].push_back(t.worker_id);
  }
  return out;
}

std::string Cluster::task_name(const ClusterTask& t) const {
  return t.type + " " + std::to_string(t.index) + " (id " + t.worker_id + ")";
}

json Cluster::to_json() const {
  json out{{"id", id},
           {"mode", cluster_mode_name(request.mode)},
           {"status", cluster_status_name(status)},
           {"workers", workers_json()},
           {"n_workers", request.n_workers},
           {"n_ps", request.n_ps},
           {"n_chief", request.n_chief},
           {"n_evaluator", request.n_evaluator},
           {"cluster_spec", cluster_spec},
           {"hostfile", hostfile},
           {"reason", reason},
           {"created_at", created_at},
           {"finished_at", finished_at ? json(*finished_at) : json(nullptr)},
           {"launch", request.mode == ClusterMode::kMpi && request.launch},
           {"launcher_exit_code", launcher_exit_code ? json(*launcher_exit_code) : json(nullptr)}};
  out["horovodrun_command"] = horovodrun_argv.empty() ? "" : clusterspec::join_for_shell(horovodrun_argv);
  out["mpirun_command"] = mpirun_argv.empty() ? "" : clusterspec::join_for_shell(mpirun_argv);
  out["horovodrun_argv"] = horovodrun_argv;
  out["mpirun_argv"] = mpirun_argv;
  if (request.mode == ClusterMode::kMpi) {
    const json r = request.to_json();
    for (const char* key : {"network_interfaces", "fusion_threshold_mb", "cycle_time_ms", "timeline_filename",
                            "start_timeout", "verbose"}) {
      out[key] = r.at(key);
    }
  }
  return out;
}

json Cluster::to_record() const {
  json out = to_json();
  out["request"] = request.to_json();
  json tasks_json = json::array();
  for (const auto& t : tasks) tasks_json.push_back({{"type", t.type}, {"index", t.index}, {"worker_id", t.worker_id}});
  out["tasks"] = tasks_json;
  if (launcher_process) {
    out["launcher_process"] = {{"pid", launcher_process->pid},
                               {"start_time", launcher_process->start_time},
                               {"pgid", launcher_process->pid}};
  }
  return out;
}

api::Result<Cluster> Cluster::from_record(const json& j) {
  try {
    Cluster c;
    c.id = j.at("id").get<std::string>();
    auto request = cluster_request_from_json(j.at("request"));
    if (!request) return request.status();
    c.request = request.value();
    auto status = parse_cluster_status(j.at("status").get<std::string>());
    if (!status) return api::internal_error("stored cluster " + c.id + " has an unknown status");
    c.status = *status;
    for (const auto& t : j.at("tasks")) {
      c.tasks.push_back({t.at("type").get<std::string>(), t.at("index").get<int>(), t.at("worker_id").get<std::string>()});
    }
    c.cluster_spec = j.value("cluster_spec", json(nullptr));
    c.horovodrun_argv = j.value("horovodrun_argv", std::vector<std::string>{});
    c.mpirun_argv = j.value("mpirun_argv", std::vector<std::string>{});
    c.hostfile = j.value("hostfile", "");
    c.reason = j.value("reason", "");
    c.created_at = j.value("created_at", "");
    if (j.contains("finished_at") && j["finished_at"].is_string()) c.finished_at = j["finished_at"].get<std::string>();
    if (j.contains("launcher_exit_code") && j["launcher_exit_code"].is_number_integer()) {
      c.launcher_exit_code = j["launcher_exit_code"].get<int>();
    }
    if (j.contains("launcher_process") && j["launcher_process"].is_object()) {
      const json& p = j["launcher_process"];
      base::ProcessId id{p.value("pid", 0), p.value("start_time", 0ull)};
      if (id.valid()) c.launcher_process = id;
    }
    return c;
  } catch (const json::exception& e) {
    return api::internal_error(std::string("stored cluster is malformed: ") + e.what());
  }
}

}  // namespace muster::service
