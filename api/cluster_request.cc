#include "api/cluster.h"

#include <algorithm>
#include <cmath>
#include <set>

#include "api/body_reader.h"
#include "api/kernel.h"
#include "clusterspec/names.h"
#include "api/worker.h"
#include "api/cluster_request_recovery.h"

namespace muster::api {

using nlohmann::json;

namespace {

constexpr int kMaxSlots = 1024;

Status bad(const std::string& field, const std::string& message) {
  return invalid_argument(field + " " + message, field);
}

}  // namespace

// Read with the one body reader (api/body_reader.h); null means absent here,
// as the document allows null for the optional fields.
Result<ClusterRequest> parse_cluster_request(const json& body, int max_workers) {
  static const std::set<std::string> kFields = {
      "mode", "n_workers", "n_ps", "cpu", "memory", "nvidia_gpu", "worker_script", "args", "env", "ps_script",
      "slots", "ssh_port", "network_interface", "network_interfaces", "timeout_seconds", "launch",
      "fusion_threshold_mb", "cycle_time_ms", "timeline_filename", "start_timeout", "verbose", "n_chief",
      "n_evaluator", "python", "workers", "max_restarts", "min_np", "max_np", "reset_limit",
      "blacklist_cooldown_range", "nproc_per_node"};
  auto reader = BodyReader::of(body, kFields, BodyReader::Nulls::kAbsent);
  if (!reader) return reader.status();
  const BodyReader& in = reader.value();
  ClusterRequest r;
  std::string mode = "ps";
  if (auto s = in.string("mode", &mode); !s) return s;
  if (mode == "ps") {
    r.mode = ClusterKind::kPs;
  } else if (mode == "mpi") {
    r.mode = ClusterKind::kMpi;
  } else if (mode == "elastic") {
    r.mode = ClusterKind::kElastic;
  } else if (mode == "torchrun") {
    r.mode = ClusterKind::kTorchrun;
  } else {
    return bad("mode", "must be \"ps\", \"mpi\", \"elastic\" or \"torchrun\"");
  }
  if (in.has("workers")) {
    if (r.mode != ClusterKind::kMpi) return bad("workers", "is for mpi mode only (the hosts of the ranks)");
    const json& list = in.at("workers");
    if (!list.is_array() || list.empty()) return bad("workers", "must be a non-empty list of running workers' ids");
    for (const auto& id : list) {
      if (!id.is_string() || id.get<std::string>().empty() || id.get<std::string>().find('\0') != std::string::npos) {
        return bad("workers", "must be a list of worker ids (strings)");
      }
      if (std::find(r.workers.begin(), r.workers.end(), id.get<std::string>()) != r.workers.end()) {
        return bad("workers", "names worker " + id.get<std::string>() + " twice (give a worker more ranks with slots)");
      }
      r.workers.push_back(id.get<std::string>());
    }
    if (r.workers.size() > static_cast<size_t>(max_workers)) {
      return bad("workers", "has more than the " + std::to_string(max_workers) + " workers this daemon allows");
    }
    if (in.has("n_workers")) {
      return bad("n_workers", "must be left out with workers (their number, " + std::to_string(r.workers.size()) +
                                  ", is the cluster's n_workers)");
    }
    r.n_workers = static_cast<int>(r.workers.size());
  } else {
    if (auto s = in.required("n_workers"); !s) return s;
    if (auto s = in.integer("n_workers", 1, max_workers, &r.n_workers); !s) return s;
  }
  // At least one worker task comes beside the PS tasks.
  if (auto s = in.integer("n_ps", 0, max_workers - 1, &r.n_ps); !s) return s;
  if (r.mode != ClusterKind::kPs && r.n_ps != 0) {
    return bad("n_ps", std::string("is for ps mode only (") + cluster_kind_name(r.mode) +
                           " mode has no parameter servers)");
  }
  if (auto s = in.integer("n_chief", 0, 1, &r.n_chief); !s) return s;
  if (auto s = in.integer("n_evaluator", 0, 1, &r.n_evaluator); !s) return s;
  if (r.mode != ClusterKind::kPs && r.n_chief != 0) return bad("n_chief", "is for ps mode only (TensorFlow's chief task)");
  if (r.mode != ClusterKind::kPs && r.n_evaluator != 0) {
    return bad("n_evaluator", "is for ps mode only (TensorFlow's evaluator task)");
  }
  const int total = r.n_workers + r.n_ps + r.n_chief + r.n_evaluator;
  if (total > max_workers) {
    return bad("n_workers", "+ n_ps + n_chief + n_evaluator is " + std::to_string(total) + ", more than the " +
                                std::to_string(max_workers) + " workers this daemon allows");
  }
  if (auto s = in.number("cpu", false, &r.cpu); !s) return s;
  if (auto s = in.number("memory", false, &r.memory); !s) return s;
  if (auto s = in.integer("nvidia_gpu", 0, 64, &r.nvidia_gpu); !s) return s;
  if (auto s = in.string("worker_script", &r.worker_script); !s) return s;
  if (auto s = in.string("ps_script", &r.ps_script); !s) return s;
  // Checked here too, since without PS tasks ps_script is never launched.
  for (const auto& [field, script] : {std::pair<const char*, const std::string*>{"worker_script", &r.worker_script},
                                      {"ps_script", &r.ps_script}}) {
    if (script->empty()) continue;
    if (auto s = check_script_path(*script, field); !s) return s;
  }
  if (r.mode != ClusterKind::kPs && !r.ps_script.empty()) return bad("ps_script", "is for ps mode only");
  if (r.mode != ClusterKind::kPs && r.worker_script.empty()) {
    return bad("worker_script", std::string("is required in ") + cluster_kind_name(r.mode) +
                                    " mode: it is the program every rank runs");
  }
  if (auto s = in.strings("args", &r.args); !s) return s;
  if (auto s = in.env("env", &r.env); !s) return s;
  if (auto s = in.integer("slots", 1, kMaxSlots, &r.slots); !s) return s;
  if (auto s = in.integer("ssh_port", 1, 65535, &r.ssh_port); !s) return s;
  std::string one_interface;
  if (auto s = in.string("network_interface", &one_interface); !s) return s;
  if (!one_interface.empty() && !clusterspec::is_valid_interface(one_interface)) {
    return bad("network_interface", clusterspec::quoted(one_interface) + " is not an interface name ([A-Za-z0-9._-], at most 15 characters)");
  }
  if (in.has("network_interfaces")) {
    if (!one_interface.empty()) return bad("network_interfaces", "and network_interface: give one of them");
    const json& list = in.at("network_interfaces");
    if (!list.is_array()) return bad("network_interfaces", "must be a list of interface names");
    for (const auto& name : list) {
      if (!name.is_string() || !clusterspec::is_valid_interface(name.get<std::string>())) {
        return bad("network_interfaces", (name.is_string() ? clusterspec::quoted(name.get<std::string>()) : name.dump()) +
                                             " is not an interface name ([A-Za-z0-9._-], at most 15 characters)");
      }
      r.network_interfaces.push_back(name.get<std::string>());
    }
  } else if (!one_interface.empty()) {
    r.network_interfaces.push_back(one_interface);
  }
  if (in.has("fusion_threshold_mb")) {
    int mb = 0;
    if (auto s = in.integer("fusion_threshold_mb", 0, 1 << 20, &mb); !s) return s;
    r.fusion_threshold_mb = mb;
  }
  if (in.has("cycle_time_ms")) {
    double v = 0;
    if (auto s = in.number("cycle_time_ms", false, &v); !s) return s;
    r.cycle_time_ms = v;
  }
  if (auto s = in.string("timeline_filename", &r.timeline_filename); !s) return s;
  if (!r.timeline_filename.empty() && r.timeline_filename[0] == '-') {
    return bad("timeline_filename", "must not start with '-' (it would read as an option)");
  }
  if (in.has("start_timeout")) {
    int v = 0;
    if (auto s = in.integer("start_timeout", 1, 86400, &v); !s) return s;
    r.start_timeout = v;
  }
  if (auto s = in.boolean("verbose", &r.verbose); !s) return s;
  // ps and torchrun take none of horovodrun's options (elastic takes the
  // interfaces and start_timeout; parse_recovery_fields refuses the rest).
  if (r.mode == ClusterKind::kPs || r.mode == ClusterKind::kTorchrun) {
    for (const char* field : {"network_interface", "network_interfaces", "fusion_threshold_mb", "cycle_time_ms",
                              "timeline_filename", "start_timeout", "verbose"}) {
      if (in.has(field)) return bad(field, "is a horovodrun option, for mpi mode only");
    }
  }
  if (auto s = in.string("python", &r.python); !s) return s;
  if (auto s = check_python(r.python, "python"); !s) return s;
  if (r.mode == ClusterKind::kTorchrun) {
    if (in.has("slots")) return bad("slots", "is for mpi mode; torchrun mode runs nproc_per_node processes per worker");
    if (auto s = in.integer("nproc_per_node", 1, kMaxSlots, &r.nproc_per_node); !s) return s;
  } else if (in.has("nproc_per_node")) {
    return bad("nproc_per_node", "is a torchrun option, for torchrun mode only");
  }
  if (auto s = in.number("timeout_seconds", true, &r.timeout_seconds); !s) return s;
  if (auto s = in.boolean("launch", &r.launch); !s) return s;
  if (r.mode != ClusterKind::kMpi && r.mode != ClusterKind::kElastic && in.has("launch") && !r.launch) {
    return bad("launch", std::string("is for mpi mode only (") + cluster_kind_name(r.mode) +
                             "-mode tasks always start once released)");
  }
  if (auto s = parse_recovery_fields(body, max_workers, r); !s) return s;
  return r;
}

json ClusterRequest::to_json() const {
  return json{{"mode", cluster_kind_name(mode)},
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
              {"n_evaluator", n_evaluator},
              {"python", python},
              {"workers", workers},
              {"max_restarts", max_restarts},
              {"nproc_per_node", nproc_per_node},
              {"min_np", min_np ? json(*min_np) : json(nullptr)},
              {"max_np", max_np ? json(*max_np) : json(nullptr)},
              {"reset_limit", reset_limit ? json(*reset_limit) : json(nullptr)},
              {"blacklist_cooldown_range", blacklist_cooldown_range
                                               ? json::array({blacklist_cooldown_range->first,
                                                              blacklist_cooldown_range->second})
                                               : json(nullptr)}};
}

Result<ClusterRequest> cluster_request_from_json(const json& j) {
  try {
    ClusterRequest r;
    const std::string mode = j.at("mode").get<std::string>();
    r.mode = mode == "mpi"        ? ClusterKind::kMpi
             : mode == "elastic"  ? ClusterKind::kElastic
             : mode == "torchrun" ? ClusterKind::kTorchrun
                                  : ClusterKind::kPs;
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
    r.python = j.value("python", "");
    if (j.contains("workers")) r.workers = j.at("workers").get<std::vector<std::string>>();
    r.max_restarts = j.value("max_restarts", 0);
    if (j.contains("min_np") && !j["min_np"].is_null()) r.min_np = j["min_np"].get<int>();
    if (j.contains("max_np") && !j["max_np"].is_null()) r.max_np = j["max_np"].get<int>();
    if (j.contains("reset_limit") && !j["reset_limit"].is_null()) r.reset_limit = j["reset_limit"].get<int>();
    if (j.contains("blacklist_cooldown_range") && j["blacklist_cooldown_range"].is_array()) {
      r.blacklist_cooldown_range = {j["blacklist_cooldown_range"].at(0).get<int>(),
                                    j["blacklist_cooldown_range"].at(1).get<int>()};
    }
    r.nproc_per_node = j.value("nproc_per_node", 1);
    return r;
  } catch (const json::exception& e) {
    return internal_error(std::string("stored cluster request is malformed: ") + e.what());
  }
}

}  // namespace muster::api
