#include "api/cluster.h"

#include "api/base/shell_quote.h"

namespace muster::api {

using nlohmann::json;

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

const char* cluster_kind_name(ClusterKind mode) {
  switch (mode) {
    case ClusterKind::kPs: return "ps";
    case ClusterKind::kMpi: return "mpi";
    case ClusterKind::kElastic: return "elastic";
    case ClusterKind::kTorchrun: return "torchrun";
  }
  return "unknown";
}

std::string RankFailure::describe() const {
  std::string text = "rank " + std::to_string(rank);
  if (!host.empty()) text += " on " + host;
  if (!worker_id.empty()) text += " (worker " + worker_id + ")";
  if (signal) {
    text += " was killed by signal " + std::to_string(*signal) + (signal_name.empty() ? "" : " (" + signal_name + ")");
  } else if (exit_code) {
    text += " exited with code " + std::to_string(*exit_code);
  } else {
    text += " failed";
  }
  if (!exception.empty()) text += ": " + exception;
  return text;
}

json RankFailure::to_json() const {
  return json{{"rank", rank},
              {"host", host},
              {"worker_id", worker_id},
              {"exit_code", exit_code ? json(*exit_code) : json(nullptr)},
              {"signal", signal ? json(*signal) : json(nullptr)},
              {"signal_name", signal_name},
              {"exception", exception},
              {"log_tail", log_tail},
              {"then_failed", then_failed}};
}

Result<RankFailure> RankFailure::from_json(const json& j) {
  try {
    RankFailure f;
    f.rank = j.at("rank").get<int>();
    f.host = j.value("host", "");
    f.worker_id = j.value("worker_id", "");
    if (j.contains("exit_code") && j["exit_code"].is_number_integer()) f.exit_code = j["exit_code"].get<int>();
    if (j.contains("signal") && j["signal"].is_number_integer()) f.signal = j["signal"].get<int>();
    f.signal_name = j.value("signal_name", "");
    f.exception = j.value("exception", "");
    f.log_tail = j.value("log_tail", std::vector<std::string>{});
    f.then_failed = j.value("then_failed", "");
    return f;
  } catch (const json::exception& e) {
    return internal_error(std::string("stored failed_rank is malformed: ") + e.what());
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
  std::string ranks;  // torchrun: the ranks this worker's processes hold
  if (request.mode == ClusterKind::kTorchrun) {
    const int first = t.index * request.nproc_per_node;
    ranks = request.nproc_per_node == 1
                ? ", rank " + std::to_string(first)
                : ", ranks " + std::to_string(first) + "-" + std::to_string(first + request.nproc_per_node - 1);
  }
  return t.type + " " + std::to_string(t.index) + " (id " + t.worker_id + ranks + ")";
}

json Cluster::to_json() const {
  json out{{"id", id},
           {"mode", cluster_kind_name(request.mode)},
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
           {"launch", request.mode == ClusterKind::kMpi && request.launch},
           {"launcher_exit_code", launcher_exit_code ? json(*launcher_exit_code) : json(nullptr)}};
  out["horovodrun_command"] = horovodrun_argv.empty() ? "" : base::join_for_shell(horovodrun_argv);
  out["mpirun_command"] = mpirun_argv.empty() ? "" : base::join_for_shell(mpirun_argv);
  out["failed_rank"] = failed_rank ? failed_rank->to_json() : json(nullptr);
  out["horovodrun_argv"] = horovodrun_argv;
  out["mpirun_argv"] = mpirun_argv;
  // Recoveries: the generations, and what bounds them.
  json history = json::array();
  for (const auto& g : generations) history.push_back(api::to_json(g));
  out["generations"] = history;
  out["generation"] = generations.empty() ? 0 : generations.back().generation;
  json events = json::array();
  for (const auto& e : events_of(generations)) events.push_back(api::to_json(e));
  out["events"] = events;
  out["restarts"] = restarts;
  out["resets"] = resets;
  out["max_restarts"] = request.max_restarts;
  if (request.mode == ClusterKind::kElastic) {
    const json r = request.to_json();
    out["min_np"] = request.min_np.value_or(request.n_workers);
    out["max_np"] = request.max_np.value_or(request.n_workers);
    out["reset_limit"] = r.at("reset_limit");
    out["blacklist_cooldown_range"] = r.at("blacklist_cooldown_range");
    out["blacklist"] = elastic_state.is_object() ? elastic_state.value("blacklist", json::array()) : json::array();
  }
  out["torchrun_command"] = torchrun_argv.empty() ? "" : base::join_for_shell(torchrun_argv);
  out["torchrun_argv"] = torchrun_argv;
  if (request.mode == ClusterKind::kMpi) {
    const json r = request.to_json();
    for (const char* key : {"network_interfaces", "fusion_threshold_mb", "cycle_time_ms", "timeline_filename",
                            "start_timeout", "verbose"}) {
      out[key] = r.at(key);
    }
  }
  if (request.mode == ClusterKind::kTorchrun) {
    out["nproc_per_node"] = request.nproc_per_node;
    out["max_restarts"] = request.max_restarts;
  }
  return out;
}

json Cluster::to_record() const {
  json out = to_json();
  out["request"] = request.to_json();
  json tasks_json = json::array();
  for (const auto& t : tasks) tasks_json.push_back({{"type", t.type}, {"index", t.index}, {"worker_id", t.worker_id}});
  out["tasks"] = tasks_json;
  if (!elastic_state.is_null()) out["elastic_state"] = elastic_state;
  if (!script_path.empty()) out["script_path"] = script_path.string();
  if (launcher_process) {
    out["launcher_process"] = {{"pid", launcher_process->pid},
                               {"start_time", launcher_process->start_time},
                               {"pgid", launcher_process->pid}};
  }
  return out;
}

Result<Cluster> Cluster::from_record(const json& j) {
  try {
    Cluster c;
    c.id = j.at("id").get<std::string>();
    auto request = cluster_request_from_json(j.at("request"));
    if (!request) return request.status();
    c.request = request.value();
    auto status = parse_cluster_status(j.at("status").get<std::string>());
    if (!status) return internal_error("stored cluster " + c.id + " has an unknown status");
    c.status = *status;
    for (const auto& t : j.at("tasks")) {
      c.tasks.push_back({t.at("type").get<std::string>(), t.at("index").get<int>(), t.at("worker_id").get<std::string>()});
    }
    c.cluster_spec = j.value("cluster_spec", json(nullptr));
    c.horovodrun_argv = j.value("horovodrun_argv", std::vector<std::string>{});
    c.mpirun_argv = j.value("mpirun_argv", std::vector<std::string>{});
    c.torchrun_argv = j.value("torchrun_argv", std::vector<std::string>{});
    c.hostfile = j.value("hostfile", "");
    c.reason = j.value("reason", "");
    c.created_at = j.value("created_at", "");
    if (j.contains("finished_at") && j["finished_at"].is_string()) c.finished_at = j["finished_at"].get<std::string>();
    if (j.contains("launcher_exit_code") && j["launcher_exit_code"].is_number_integer()) {
      c.launcher_exit_code = j["launcher_exit_code"].get<int>();
    }
    if (j.contains("failed_rank") && j["failed_rank"].is_object()) {
      auto failure = RankFailure::from_json(j["failed_rank"]);
      if (failure) c.failed_rank = failure.value();
    }
    for (const auto& g : j.value("generations", json::array())) {
      auto parsed = generation_from_json(g);
      if (!parsed) return parsed.status();
      c.generations.push_back(std::move(parsed).value());
    }
    c.restarts = j.value("restarts", 0);
    c.resets = j.value("resets", 0);
    c.elastic_state = j.value("elastic_state", json(nullptr));
    c.script_path = j.value("script_path", std::string());
    if (j.contains("launcher_process") && j["launcher_process"].is_object()) {
      const json& p = j["launcher_process"];
      base::ProcessId id{p.value("pid", 0), p.value("start_time", 0ull)};
      if (id.valid()) c.launcher_process = id;
    }
    return c;
  } catch (const json::exception& e) {
    return internal_error(std::string("stored cluster is malformed: ") + e.what());
  }
}

}  // namespace muster::api
