#include "muster/service/cluster_types.h"

#include <algorithm>
#include <cmath>
#include <set>

#include "muster/clusterspec/names.h"
#include "muster/clusterspec/shell.h"

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
  if (!it->is_number_integer()) return bad(field, "must be an integer");
  long long v = it->is_number_unsigned() ? static_cast<long long>(std::min<uint64_t>(it->get<uint64_t>(), 1ull << 40))
                                         : it->get<long long>();
  if (v < lo || v > hi) return bad(field, "must be in " + std::to_string(lo) + ".." + std::to_string(hi) + ", got " + std::to_string(v));
  *out = static_cast<int>(v);
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
      "slots", "ssh_port", "network_interface", "timeout_seconds", "launch"};
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
  if (!body.contains("n_workers")) return bad("n_workers", "is required");
  if (auto s = read_int(body, "n_workers", 1, max_workers, &r.n_workers); !s) return s;
  if (auto s = read_int(body, "n_ps", 0, max_workers, &r.n_ps); !s) return s;
  if (r.mode == ClusterMode::kMpi && r.n_ps != 0) return bad("n_ps", "is for ps mode only (mpi mode has no parameter servers)");
  if (r.n_workers + r.n_ps > max_workers) {
    return bad("n_workers", "+ n_ps is " + std::to_string(r.n_workers + r.n_ps) + ", more than the " +
                                std::to_string(max_workers) + " workers this daemon allows");
  }
  if (auto s = read_number(body, "cpu", false, &r.cpu); !s) return s;
  if (auto s = read_number(body, "memory", false, &r.memory); !s) return s;
  if (auto s = read_int(body, "nvidia_gpu", 0, 64, &r.nvidia_gpu); !s) return s;
  if (auto s = read_string(body, "worker_script", &r.worker_script); !s) return s;
  if (auto s = read_string(body, "ps_script", &r.ps_script); !s) return s;
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
  if (auto s = read_string(body, "network_interface", &r.network_interface); !s) return s;
  if (!r.network_interface.empty() && !clusterspec::is_valid_interface(r.network_interface)) {
    return bad("network_interface", clusterspec::quoted(r.network_interface) + " is not an interface name ([A-Za-z0-9._-], at most 15 characters)");
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
              {"network_interface", network_interface},
              {"timeout_seconds", timeout_seconds},
              {"launch", launch}};
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
    r.network_interface = j.at("network_interface").get<std::string>();
    r.timeout_seconds = j.at("timeout_seconds").get<double>();
    r.launch = j.at("launch").get<bool>();
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
