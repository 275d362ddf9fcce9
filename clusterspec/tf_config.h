// TfConfig: the TF_CONFIG environment variable TensorFlow reads in every task.
//
//   {"cluster": {"chief": [...], "worker": ["host:port", ...], "ps": [...]},
//    "task": {"type": "worker", "index": 0},
//    "environment": "cloud"}
//
// musterd builds one per task of a ps-mode cluster and hands it to the task as
// TF_CONFIG (and as cluster.json in its worker directory, MUSTER_WORKER_DIR).
// Programs read it back with from_env():
//
//   #include "clusterspec/tf_config.h"
//   using muster::clusterspec::TfConfig;
//   TfConfig config = TfConfig::from_env();          // throws SpecError if unset/invalid
//   if (config.task_type == "ps") {
//     serve_on(config.task_address());               // e.g. "127.0.0.1:40211"
//   } else {
//     auto ps = config.cluster.tasks("ps");          // every PS address, index order
//     bool chief = config.is_chief();
//   }
//
// Building one:
//   TfConfig config;
//   config.cluster.add_task("ps", "10.0.0.7:2222");
//   config.cluster.add_task("worker", "10.0.0.5:2222");
//   config.task_type = "worker";
//   config.task_index = 0;
//   setenv("TF_CONFIG", config.dump().c_str(), 1);
//
// Rules (TensorFlow's multi_worker_util): the cluster follows
// ClusterSpec::validate(); task.type is chief, worker, ps or evaluator; it is
// present in the cluster (an evaluator may stand outside it); task.index is in
// range. Errors: parse/from_env throw SpecError, validate() returns the
// message, e.g.
//   TF_CONFIG: task.index 3 out of range: cluster has 2 "worker" tasks
#pragma once

#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "clusterspec/cluster_spec.h"

namespace muster::clusterspec {

struct TfConfig {
  ClusterSpec cluster;
  std::string task_type;
  int task_index = 0;
  std::string environment = "cloud";  // "" leaves the key out

  // nullopt when valid, else what is wrong ("TF_CONFIG: ...").
  std::optional<std::string> validate() const;

  // This task's own "host:port" (throws SpecError if there is none, e.g. an
  // evaluator outside the cluster).
  std::string task_address() const;

  // True for the chief, or for worker 0 when the cluster has no chief
  // (TensorFlow's convention for who writes checkpoints).
  bool is_chief() const;

  nlohmann::json to_json() const;
  std::string dump() const { return to_json().dump(); }

  // Parse and validate; throw SpecError.
  static TfConfig from_json(const nlohmann::json& json);
  static TfConfig parse(const std::string& json);
  // Reads the TF_CONFIG environment variable; throws SpecError when it is
  // unset, empty or invalid.
  static TfConfig from_env();
  // Like from_env() but nullopt when TF_CONFIG is unset or empty.
  static std::optional<TfConfig> from_env_if_set();
};

}  // namespace muster::clusterspec
