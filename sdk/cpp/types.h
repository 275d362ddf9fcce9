// Typed views of the daemon's JSON objects, and the options of each call.
//
// Every parsed object keeps the JSON it came from in `raw`, so a field the
// daemon adds later is never lost. Timestamps are kept as the daemon sends
// them (as text). Parsing is lenient about missing fields (they keep their
// defaults) and strict about types only where a wrong type would mislead.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace muster::sdk {

struct Worker {
  std::string id;
  std::string status;                 // scheduling, starting, running, succeeded, failed, timedout, stopped, lost
  std::string ip_address = "unknown";
  double cpu = 0;
  double memory = 0;
  int nvidia_gpu = 0;
  std::string kernel;
  std::string script;
  std::string cluster_id;
  std::string created_at;
  std::string started_at;
  std::string running_at;             // cdsw's: when it started running; "" until then
  std::string finished_at;
  std::optional<double> duration;     // seconds running (so far, or in all); unset until known
  std::optional<int> exit_code;
  std::string reason;
  nlohmann::json raw;

  static Worker from_json(const nlohmann::json& j);
};

// launch_workers' full answer: the workers and the daemon's notes (e.g.
// "script wins over code" when both were given, as in cdsw).
struct LaunchResult {
  std::vector<Worker> workers;
  std::vector<std::string> warnings;
};

// await_workers' answer: `workers` met the condition, `failures` did not.
struct AwaitResult {
  std::vector<Worker> workers;
  std::vector<Worker> failures;
};

// One generation of a cluster: its failures and recoveries (schema
// ClusterGeneration): an elastic cluster's world, or one run of every task
// under max_restarts.
struct ClusterGeneration {
  struct Death {
    std::string worker_id, task, reason, at;
  };
  struct Replacement {
    std::string replaced, by, at;
  };
  int generation = 0;
  std::string cause;  // "start", "reset", "restart"
  std::string started_at;
  std::optional<std::string> ended_at;
  std::string end_reason;
  std::vector<std::string> members;  // worker ids, rank order
  std::vector<Death> deaths;
  std::vector<Replacement> replacements;
  std::optional<double> recovery_seconds;
  std::optional<double> resume_seconds;
  std::optional<int> batches_redone;

  static ClusterGeneration from_json(const nlohmann::json& j);
};

struct Cluster {
  std::string id;
  std::string mode;    // "ps", "mpi", "elastic" or "torchrun"
  std::string status;  // starting, running, succeeded, failed, stopped
  // Worker ids by task type ("ps", "worker", ...), in index order.
  std::map<std::string, std::vector<std::string>> workers;
  nlohmann::json cluster_spec;  // {"ps": ["ip:port"...], "worker": [...]} once known
  std::string horovodrun_command;
  std::string mpirun_command;
  std::string torchrun_command;  // torchrun mode: the line every node would run
  std::string hostfile;
  std::string reason;
  std::vector<std::string> warnings;  // the daemon's notes on a create answer
  std::vector<ClusterGeneration> generations;  // failures and recoveries, oldest first
  int restarts = 0;  // under max_restarts
  int resets = 0;    // elastic: times the world re-formed
  nlohmann::json raw;

  static Cluster from_json(const nlohmann::json& j);
  bool ended() const { return status == "succeeded" || status == "failed" || status == "stopped"; }
};

// POST /api/v1/workers. Defaults are cdsw's.
struct LaunchOptions {
  int n = 1;
  double cpu = 1;
  double memory = 1;  // GiB
  int nvidia_gpu = 0;
  std::string kernel = "python3";
  std::string script;  // a file in the daemon's project directory
  std::string code;    // inline code (python3 kernel) instead of a script
  std::map<std::string, std::string> env;
  std::vector<std::string> args;

  nlohmann::json to_json() const;
};

struct AwaitOptions {
  bool wait_for_completion = true;  // false: until running with an IP
  double timeout_seconds = 60;      // 0: no timeout
};

// POST /api/v1/clusters. Unset optionals use the daemon's defaults.
struct ClusterOptions {
  std::string mode = "ps";  // "ps", "mpi", "elastic" or "torchrun"
  int n_workers = 1;
  int n_ps = 0;             // ps mode only
  double cpu = 1;
  double memory = 1;
  int nvidia_gpu = 0;
  std::string worker_script;
  std::string ps_script;
  std::vector<std::string> args;
  std::map<std::string, std::string> env;
  int slots = 1;                       // mpi only
  std::optional<int> ssh_port;         // mpi only, daemon default 2222
  std::string network_interface;
  double timeout_seconds = 60;         // start-up limit
  std::optional<bool> launch;          // mpi: run the mpirun line (daemon default true)
  // ps mode, TensorFlow 2's roles: a chief (coordinator, in the cluster spec)
  // and an evaluator (outside it); 0 or 1 each, sent only when 1.
  int n_chief = 0;
  int n_evaluator = 0;
  // mpi mode, horovodrun's tuning options; sent only when set.
  std::optional<int> fusion_threshold_mb;
  std::optional<double> cycle_time_ms;
  std::string timeline_filename;
  std::optional<int> start_timeout;      // seconds
  std::optional<bool> verbose;
  std::vector<std::string> network_interfaces;
  // ps, mpi and torchrun: restart every task after a failure, up to this many times.
  std::optional<int> max_restarts;
  // elastic mode (horovodrun's elastic flags); sent only when set.
  std::optional<int> min_np;
  std::optional<int> max_np;
  std::optional<int> reset_limit;
  std::optional<std::pair<int, int>> blacklist_cooldown_range;  // seconds
  // torchrun mode: processes per worker (torchrun --nproc_per_node).
  int nproc_per_node = 1;

  nlohmann::json to_json() const;
};

// run_cluster's answer, as Cloudera's helper: the ClusterSpec and the
// "grpc://host:port" of the chief (else worker 0), plus the cluster itself.
struct RunClusterResult {
  nlohmann::json cluster_spec;
  std::string session_addr;
  Cluster cluster;
};

// The strings of an array field ("warnings"); [] when absent.
std::vector<std::string> strings(const nlohmann::json& j, const char* key);

// Ids of workers, e.g. for await_workers(ids_of(launch_workers(...))).
std::vector<std::string> ids_of(const std::vector<Worker>& workers);

// "grpc://..." of the chief, else worker 0, of a ClusterSpec; "" if neither.
std::string session_address(const nlohmann::json& cluster_spec);

}  // namespace muster::sdk
