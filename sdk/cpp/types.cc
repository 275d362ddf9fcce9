#include "sdk/cpp/types.h"

namespace muster::sdk {
namespace {

using nlohmann::json;

std::string text(const json& j, const char* key, std::string fallback = {}) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  if (it->is_string()) return it->get<std::string>();
  return it->dump();
}

double number(const json& j, const char* key, double fallback = 0) {
  auto it = j.find(key);
  return it != j.end() && it->is_number() ? it->get<double>() : fallback;
}

// A command line sent either as one string or as an argument vector.
std::string command(const json& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_array()) return text(j, key);
  std::string out;
  for (const auto& a : *it) {
    if (!out.empty()) out += ' ';
    out += a.is_string() ? a.get<std::string>() : a.dump();
  }
  return out;
}

}  // namespace

std::vector<std::string> strings(const json& j, const char* key) {
  std::vector<std::string> out;
  auto it = j.find(key);
  if (it == j.end() || !it->is_array()) return out;
  for (const auto& s : *it) out.push_back(s.is_string() ? s.get<std::string>() : s.dump());
  return out;
}

Worker Worker::from_json(const json& j) {
  Worker w;
  w.id = text(j, "id");
  w.status = text(j, "status");
  w.ip_address = text(j, "ip_address", "unknown");
  w.cpu = number(j, "cpu");
  w.memory = number(j, "memory");
  w.nvidia_gpu = static_cast<int>(number(j, "nvidia_gpu"));
  w.kernel = text(j, "kernel");
  w.script = text(j, "script");
  w.cluster_id = text(j, "cluster_id");
  w.created_at = text(j, "created_at");
  w.started_at = text(j, "started_at");
  w.running_at = text(j, "running_at");
  w.finished_at = text(j, "finished_at");
  if (auto it = j.find("duration"); it != j.end() && it->is_number()) w.duration = it->get<double>();
  if (auto it = j.find("exit_code"); it != j.end() && it->is_number_integer()) w.exit_code = it->get<int>();
  w.reason = text(j, "reason");
  w.raw = j;
  return w;
}

Cluster Cluster::from_json(const json& j) {
  Cluster c;
  c.id = text(j, "id");
  c.mode = text(j, "mode");
  c.status = text(j, "status");
  if (auto it = j.find("workers"); it != j.end()) {
    if (it->is_object()) {
      for (const auto& [type, ids] : it->items()) {
        auto& out = c.workers[type];
        if (ids.is_array())
          for (const auto& id : ids) out.push_back(id.is_string() ? id.get<std::string>() : id.dump());
      }
    } else if (it->is_array()) {
      for (const auto& id : *it) c.workers["worker"].push_back(id.is_string() ? id.get<std::string>() : id.dump());
    }
  }
  if (auto it = j.find("cluster_spec"); it != j.end() && it->is_object()) {
    c.cluster_spec = it->contains("cluster") ? (*it)["cluster"] : *it;  // accept TF_CONFIG shape
  }
  c.horovodrun_command = command(j, "horovodrun_command");
  c.mpirun_command = command(j, "mpirun_command");
  c.torchrun_command = command(j, "torchrun_command");
  c.hostfile = text(j, "hostfile");
  c.reason = text(j, "reason");
  c.warnings = strings(j, "warnings");
  if (auto it = j.find("generations"); it != j.end() && it->is_array()) {
    for (const auto& g : *it) c.generations.push_back(ClusterGeneration::from_json(g));
  }
  if (auto it = j.find("restarts"); it != j.end() && it->is_number_integer()) c.restarts = it->get<int>();
  if (auto it = j.find("resets"); it != j.end() && it->is_number_integer()) c.resets = it->get<int>();
  c.raw = j;
  return c;
}

ClusterGeneration ClusterGeneration::from_json(const json& j) {
  ClusterGeneration g;
  if (auto it = j.find("generation"); it != j.end() && it->is_number_integer()) g.generation = it->get<int>();
  g.cause = text(j, "cause");
  g.started_at = text(j, "started_at");
  if (auto it = j.find("ended_at"); it != j.end() && it->is_string()) g.ended_at = it->get<std::string>();
  g.end_reason = text(j, "end_reason");
  g.members = strings(j, "members");
  if (auto it = j.find("deaths"); it != j.end() && it->is_array()) {
    for (const auto& d : *it) g.deaths.push_back({text(d, "worker_id"), text(d, "task"), text(d, "reason"), text(d, "at")});
  }
  if (auto it = j.find("replacements"); it != j.end() && it->is_array()) {
    for (const auto& r : *it) g.replacements.push_back({text(r, "replaced"), text(r, "by"), text(r, "at")});
  }
  if (auto it = j.find("recovery_seconds"); it != j.end() && it->is_number()) g.recovery_seconds = it->get<double>();
  if (auto it = j.find("resume_seconds"); it != j.end() && it->is_number()) g.resume_seconds = it->get<double>();
  if (auto it = j.find("batches_redone"); it != j.end() && it->is_number_integer()) g.batches_redone = it->get<int>();
  return g;
}

json LaunchOptions::to_json() const {
  return json{{"n", n},          {"cpu", cpu},       {"memory", memory}, {"nvidia_gpu", nvidia_gpu},
              {"kernel", kernel}, {"script", script}, {"code", code},     {"env", env},
              {"args", args}};
}

json ClusterOptions::to_json() const {
  json j{{"mode", mode}, {"n_workers", n_workers}, {"cpu", cpu}, {"memory", memory},
         {"nvidia_gpu", nvidia_gpu}, {"timeout_seconds", timeout_seconds}};
  if (mode == "ps") j["n_ps"] = n_ps;
  if (mode == "mpi") j["slots"] = slots;
  if (mode == "torchrun") j["nproc_per_node"] = nproc_per_node;
  if (!worker_script.empty()) j["worker_script"] = worker_script;
  if (!ps_script.empty()) j["ps_script"] = ps_script;
  if (!args.empty()) j["args"] = args;
  if (!env.empty()) j["env"] = env;
  if (ssh_port) j["ssh_port"] = *ssh_port;
  if (!network_interface.empty()) j["network_interface"] = network_interface;
  if (launch) j["launch"] = *launch;
  if (n_chief) j["n_chief"] = n_chief;
  if (n_evaluator) j["n_evaluator"] = n_evaluator;
  if (fusion_threshold_mb) j["fusion_threshold_mb"] = *fusion_threshold_mb;
  if (cycle_time_ms) j["cycle_time_ms"] = *cycle_time_ms;
  if (!timeline_filename.empty()) j["timeline_filename"] = timeline_filename;
  if (start_timeout) j["start_timeout"] = *start_timeout;
  if (verbose) j["verbose"] = *verbose;
  if (!network_interfaces.empty()) j["network_interfaces"] = network_interfaces;
  if (max_restarts) j["max_restarts"] = *max_restarts;
  if (min_np) j["min_np"] = *min_np;
  if (max_np) j["max_np"] = *max_np;
  if (reset_limit) j["reset_limit"] = *reset_limit;
  if (blacklist_cooldown_range) {
    j["blacklist_cooldown_range"] = {blacklist_cooldown_range->first, blacklist_cooldown_range->second};
  }
  return j;
}

std::vector<std::string> ids_of(const std::vector<Worker>& workers) {
  std::vector<std::string> ids;
  ids.reserve(workers.size());
  for (const auto& w : workers) ids.push_back(w.id);
  return ids;
}

std::string session_address(const json& cluster_spec) {
  for (const char* type : {"chief", "worker"}) {
    auto it = cluster_spec.find(type);
    if (it == cluster_spec.end()) continue;
    if (it->is_array() && !it->empty() && (*it)[0].is_string()) return "grpc://" + (*it)[0].get<std::string>();
    if (it->is_object() && it->contains("0") && (*it)["0"].is_string())
      return "grpc://" + (*it)["0"].get<std::string>();
  }
  return {};
}

}  // namespace muster::sdk
