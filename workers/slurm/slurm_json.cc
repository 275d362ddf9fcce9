// sbatch's argv and the parsers of squeue's and sinfo's --json output.
#include <cmath>

#include <nlohmann/json.hpp>

#include "workers/slurm/slurm_client.h"

namespace muster::workers::slurm {

using nlohmann::json;

std::vector<std::string> sbatch_argv(const JobSpec& spec) {
  std::vector<std::string> argv = {"sbatch",
                                   "--parsable",
                                   "--job-name=" + spec.name,
                                   "--output=" + spec.output.string(),
                                   "--open-mode=append",
                                   "--chdir=" + spec.working_dir.string(),
                                   "--nodes=1",
                                   "--ntasks=1",
                                   "--cpus-per-task=" + std::to_string(spec.cpus_per_task),
                                   "--mem=" + std::to_string(spec.memory_mb) + "M",
                                   "--export=ALL"};
  if (spec.gpus > 0) argv.push_back("--gres=gpu:" + std::to_string(spec.gpus));
  if (!spec.partition.empty()) argv.push_back("--partition=" + spec.partition);
  if (!spec.account.empty()) argv.push_back("--account=" + spec.account);
  if (!spec.qos.empty()) argv.push_back("--qos=" + spec.qos);
  if (!spec.time_limit.empty()) argv.push_back("--time=" + spec.time_limit);
  argv.push_back(spec.script.string());
  return argv;
}

namespace {

// squeue's JSON gives a job's state as a string (22.05) or a list of flags
// (23.02 and later); take the first.
std::string first_string(const json& j) {
  if (j.is_string()) return j.get<std::string>();
  if (j.is_array() && !j.empty() && j[0].is_string()) return j[0].get<std::string>();
  return "";
}

// A number, or in later Slurm versions {"set": true, "number": n}.
std::optional<long> number(const json& j) {
  if (j.is_number_integer()) return j.get<long>();
  if (j.is_object() && j.value("set", false) && j.contains("number") && j["number"].is_number_integer()) {
    return j["number"].get<long>();
  }
  return std::nullopt;
}

}  // namespace

api::Result<std::map<std::string, JobInfo>> parse_squeue_json(const std::string& text) {
  const json doc = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded() || !doc.is_object()) return api::invalid_argument("squeue --json printed no JSON object");
  if (!doc.contains("jobs") || !doc["jobs"].is_array()) {
    return api::invalid_argument("squeue --json: no \"jobs\" array in its output");
  }
  std::map<std::string, JobInfo> out;
  for (const json& j : doc["jobs"]) {
    if (!j.is_object()) return api::invalid_argument("squeue --json: a job is not an object");
    const auto id = number(j.value("job_id", json()));
    if (!id) return api::invalid_argument("squeue --json: a job without a numeric job_id");
    JobInfo info;
    info.job_id = std::to_string(*id);
    info.state = first_string(j.value("job_state", json()));
    info.reason = j.value("state_reason", "");
    info.nodes = j.value("nodes", "");
    // exit_code is the batch script's wait status: (code << 8) | signal.
    const json& ec = j.value("exit_code", json());
    if (auto status = number(ec)) {
      if ((*status & 0x7f) != 0) {
        info.signal = static_cast<int>(*status & 0x7f);
      } else {
        info.exit_code = static_cast<int>((*status >> 8) & 0xff);
      }
    } else if (ec.is_object() && ec.contains("return_code")) {
      if (auto rc = number(ec["return_code"])) info.exit_code = static_cast<int>(*rc);
      if (ec.contains("signal") && ec["signal"].is_object()) {
        if (auto sig = number(ec["signal"].value("id", json())); sig && *sig > 0) info.signal = static_cast<int>(*sig);
      }
    }
    out[info.job_id] = std::move(info);
  }
  return out;
}

api::Result<std::map<std::string, NodeInfo>> parse_sinfo_nodes_json(const std::string& text) {
  const json doc = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded() || !doc.is_object() || !doc.contains("nodes") || !doc["nodes"].is_array()) {
    return api::invalid_argument("sinfo --json: no \"nodes\" array in its output");
  }
  std::map<std::string, NodeInfo> out;
  for (const json& n : doc["nodes"]) {
    if (!n.is_object() || !n.contains("name") || !n["name"].is_string()) continue;
    std::vector<std::string> flags;
    const json& state = n.value("state", json());
    if (state.is_string()) flags.push_back(state.get<std::string>());
    if (state.is_array()) {
      for (const auto& f : state) {
        if (f.is_string()) flags.push_back(f.get<std::string>());
      }
    }
    const json& more = n.value("state_flags", json());
    if (more.is_array()) {
      for (const auto& f : more) {
        if (f.is_string()) flags.push_back(f.get<std::string>());
      }
    }
    NodeInfo info;
    info.address = n.value("address", "");
    info.flags = std::move(flags);
    out[n["name"].get<std::string>()] = std::move(info);
  }
  return out;
}

}  // namespace muster::workers::slurm
