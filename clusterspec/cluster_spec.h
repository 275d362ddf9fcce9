// ClusterSpec: the tasks of a TensorFlow cluster, by type, in index order.
//
// Same JSON as TensorFlow's tf.train.ClusterSpec / the "cluster" part of
// TF_CONFIG:
//   {"chief": ["10.0.0.4:2222"], "worker": ["10.0.0.5:2222", "10.0.0.6:2222"],
//    "ps": ["10.0.0.7:2222"]}
// parse() also accepts TensorFlow's dict-of-index form
//   {"worker": {"0": "10.0.0.5:2222", "1": "10.0.0.6:2222"}}
// as long as the indices are exactly 0..n-1.
//
// Rules (TensorFlow's, see validate()): task types are chief, worker, ps and
// evaluator; at most one chief and one evaluator; every address is
// "host:port" (host ^[A-Za-z0-9._-]+$ or "[ipv6]", port 1..65535); no address
// is used by two tasks.
//
// Example:
//   muster::clusterspec::ClusterSpec spec;
//   spec.add_task("ps", "10.0.0.7:2222");
//   spec.add_task("worker", "10.0.0.5:2222");
//   spec.add_task("worker", "10.0.0.6:2222");
//   std::string json = spec.dump();                      // {"ps":[...],"worker":[...]}
//   auto again = muster::clusterspec::ClusterSpec::parse(json);
//   again.tasks("worker").at(1);                         // "10.0.0.6:2222"
//
// Errors: see spec_error.h (builders and parse throw SpecError, validate()
// returns the message).
#pragma once

#include <cstddef>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace muster::clusterspec {

// The task types TensorFlow's distribution strategies know.
inline constexpr const char* kChief = "chief";
inline constexpr const char* kWorker = "worker";
inline constexpr const char* kPs = "ps";
inline constexpr const char* kEvaluator = "evaluator";

bool is_known_task_type(const std::string& type);

class ClusterSpec {
 public:
  ClusterSpec() = default;

  // Appends a task of `type` at the next index and returns that index.
  // Throws SpecError for an unknown type or a malformed address.
  int add_task(const std::string& type, const std::string& address);

  // Replaces every task of `type` (an empty list removes the type).
  void set_tasks(const std::string& type, std::vector<std::string> addresses);

  // The task types present, in TensorFlow's (sorted) order.
  std::vector<std::string> task_types() const;
  bool has_type(const std::string& type) const;
  // The addresses of `type` in index order; empty if the type is absent.
  const std::vector<std::string>& tasks(const std::string& type) const;
  std::size_t num_tasks(const std::string& type) const;
  std::size_t num_tasks() const;
  // The address of one task; throws SpecError if there is no such task.
  const std::string& address(const std::string& type, int index) const;
  bool empty() const { return jobs_.empty(); }

  // nullopt when the spec follows every rule above, else what is wrong.
  // `context` prefixes the message (e.g. "TF_CONFIG: cluster").
  std::optional<std::string> validate(const std::string& context = "cluster") const;

  nlohmann::json to_json() const;
  std::string dump() const { return to_json().dump(); }

  // Parse and validate; throw SpecError.
  static ClusterSpec from_json(const nlohmann::json& json, const std::string& context = "cluster");
  static ClusterSpec parse(const std::string& json);

  bool operator==(const ClusterSpec& other) const { return jobs_ == other.jobs_; }
  bool operator!=(const ClusterSpec& other) const { return !(*this == other); }

 private:
  std::map<std::string, std::vector<std::string>> jobs_;
};

}  // namespace muster::clusterspec
