#include "clusterspec/tf_config.h"

#include <cstdlib>

#include "clusterspec/names.h"
#include "clusterspec/spec_error.h"

namespace muster::clusterspec {
namespace {

constexpr const char* kContext = "TF_CONFIG";

}  // namespace

std::optional<std::string> TfConfig::validate() const {
  if (auto error = cluster.validate("TF_CONFIG: cluster")) return error;
  if (cluster.empty()) return std::string(kContext) + ": cluster is empty";
  if (task_type.empty()) return std::string(kContext) + ": task.type is missing";
  if (!is_known_task_type(task_type)) {
    return std::string(kContext) + ": task.type " + quoted(task_type) +
           " is not one of chief, worker, ps, evaluator";
  }
  if (task_index < 0) return std::string(kContext) + ": task.index " + std::to_string(task_index) + " is negative";
  // TensorFlow lets an evaluator run outside the cluster.
  if (task_type == kEvaluator && !cluster.has_type(kEvaluator)) {
    if (task_index != 0) return std::string(kContext) + ": task.index of an evaluator outside the cluster must be 0";
    return std::nullopt;
  }
  if (!cluster.has_type(task_type)) {
    return std::string(kContext) + ": task.type \"" + task_type + "\" is not in the cluster (it has " +
           cluster.to_json().dump() + ")";
  }
  std::size_t n = cluster.num_tasks(task_type);
  if (static_cast<std::size_t>(task_index) >= n) {
    return std::string(kContext) + ": task.index " + std::to_string(task_index) + " out of range: cluster has " +
           std::to_string(n) + " \"" + task_type + "\" task" + (n == 1 ? "" : "s");
  }
  return std::nullopt;
}

std::string TfConfig::task_address() const { return cluster.address(task_type, task_index); }

bool TfConfig::is_chief() const {
  if (task_type == kChief) return true;
  return task_type == kWorker && task_index == 0 && !cluster.has_type(kChief);
}

nlohmann::json TfConfig::to_json() const {
  nlohmann::json out;
  out["cluster"] = cluster.to_json();
  out["task"] = {{"type", task_type}, {"index", task_index}};
  if (!environment.empty()) out["environment"] = environment;
  return out;
}

TfConfig TfConfig::from_json(const nlohmann::json& json) {
  if (!json.is_object()) throw SpecError(std::string(kContext) + " must be a JSON object, got " + json.type_name());
  TfConfig config;
  auto cluster = json.find("cluster");
  if (cluster == json.end()) throw SpecError(std::string(kContext) + ": \"cluster\" is missing");
  config.cluster = ClusterSpec::from_json(*cluster, "TF_CONFIG: cluster");

  auto task = json.find("task");
  if (task == json.end()) throw SpecError(std::string(kContext) + ": \"task\" is missing");
  if (!task->is_object()) throw SpecError(std::string(kContext) + ": task must be an object, got " + task->type_name());
  auto type = task->find("type");
  if (type == task->end()) throw SpecError(std::string(kContext) + ": task.type is missing");
  if (!type->is_string()) throw SpecError(std::string(kContext) + ": task.type must be a string, got " + type->type_name());
  config.task_type = type->get<std::string>();
  auto index = task->find("index");
  if (index == task->end()) {
    config.task_index = 0;  // TensorFlow's default
  } else if (index->is_number_integer()) {
    auto value = index->get<long long>();
    if (value < 0 || value > 1000000) {
      throw SpecError(std::string(kContext) + ": task.index " + std::to_string(value) + " is out of range");
    }
    config.task_index = static_cast<int>(value);
  } else {
    throw SpecError(std::string(kContext) + ": task.index must be an integer, got " + index->dump());
  }

  auto environment = json.find("environment");
  if (environment == json.end()) {
    config.environment.clear();
  } else if (environment->is_string()) {
    config.environment = environment->get<std::string>();
  } else {
    throw SpecError(std::string(kContext) + ": environment must be a string, got " + environment->type_name());
  }
  if (auto error = config.validate()) throw SpecError(*error);
  return config;
}

TfConfig TfConfig::parse(const std::string& json) {
  nlohmann::json parsed;
  try {
    parsed = nlohmann::json::parse(json);
  } catch (const nlohmann::json::exception& e) {  // parse_error, and out_of_range for numbers past double
    throw SpecError(std::string(kContext) + ": not valid JSON: " + e.what());
  }
  return from_json(parsed);
}

std::optional<TfConfig> TfConfig::from_env_if_set() {
  const char* value = std::getenv("TF_CONFIG");
  if (value == nullptr || *value == '\0') return std::nullopt;
  return parse(value);
}

TfConfig TfConfig::from_env() {
  auto config = from_env_if_set();
  if (!config) throw SpecError("TF_CONFIG is not set: run this program as a task of a muster ps-mode cluster");
  return *config;
}

}  // namespace muster::clusterspec
