// Cluster: the object of /api/v1/clusters, its request, their JSON and the
// request's validation (beside the worker's types in api/worker.h).
//
// A cluster is a group of workers started together for one distributed job:
// - mode "ps": n_ps parameter servers + n_workers workers that rendezvous
//   (each reserves a port, the daemon builds the ClusterSpec and releases
//   every task with its own TF_CONFIG);
// - mode "mpi": n_workers idle workers whose IPs make the hostfile and the
//   horovodrun/mpirun lines; with launch=true the daemon runs the mpirun line.
//   With `workers`, the ranks run on those running workers instead (the
//   notebook launched them, as for `horovodrun -H <their IPs>`): nothing is
//   launched, and they are not stopped when the cluster ends.
// - mode "elastic": n_workers ranks that musterd launches itself, one worker
//   each (no mpirun, sshd or orted), forming their world through musterd's
//   rendezvous; a rank that dies is replaced and the survivors re-form
//   (min_np .. max_np ranks; horovodrun's elastic flags).
// Any mode but elastic may restart after a failure (max_restarts, torchrun's
// semantics). Recoveries are the cluster's generations (api/cluster_history.h).
// - mode "torchrun": n_workers nodes of nproc_per_node processes each, every
//   process released with torchrun's environment (RANK, WORLD_SIZE,
//   MASTER_ADDR, MASTER_PORT, ...), so init_process_group's env:// works.
//
// Status: starting -> running -> succeeded | failed | stopped
//         starting -> failed | stopped
// The terminal statuses are never left.
#pragma once

#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "api/base/process.h"
#include "api/cluster_history.h"
#include "api/status.h"

namespace muster::api {

enum class ClusterStatus { kStarting, kRunning, kSucceeded, kFailed, kStopped };
const char* cluster_status_name(ClusterStatus status);
std::optional<ClusterStatus> parse_cluster_status(const std::string& name);
bool is_terminal(ClusterStatus status);

// Which mode a cluster runs in: the request's "mode" ("ps", "mpi",
// "elastic", "torchrun" on the wire). What a mode does is the daemon's
// ClusterMode (service/cluster/mode.h), one implementation per kind.
enum class ClusterKind { kPs, kMpi, kElastic, kTorchrun };
const char* cluster_kind_name(ClusterKind kind);

// POST /api/v1/clusters, validated (scripts are resolved when the tasks are
// launched, by the worker validation, so they are checked exactly as there).
struct ClusterRequest {
  ClusterKind mode = ClusterKind::kPs;
  int n_workers = 1;
  int n_ps = 0;
  double cpu = 1.0;
  double memory = 1.0;
  int nvidia_gpu = 0;
  std::string worker_script;  // "" in ps mode: workers wait to be stopped
  std::vector<std::string> args;
  std::map<std::string, std::string> env;
  std::string ps_script;            // "" : muster-ps if installed, else wait
  int slots = 1;                    // mpi: slots per worker
  int ssh_port = 2222;              // mpi
  // mpi: horovodrun --network-interfaces / mpirun -mca btl_tcp_if_include,
  // oob_tcp_if_include, NCCL_SOCKET_IFNAME. The body may give
  // network_interfaces (a list) or the older network_interface (one name).
  std::vector<std::string> network_interfaces;
  double timeout_seconds = 60;      // rendezvous limit; 0 = none
  bool launch = true;               // mpi: run the mpirun line
  // mpi: horovodrun's tunables (mpirun: -x HOROVOD_FUSION_THRESHOLD (bytes),
  // HOROVOD_CYCLE_TIME, HOROVOD_TIMELINE, HOROVOD_START_TIMEOUT).
  std::optional<int> fusion_threshold_mb;  // >= 0 (0: no fusion)
  std::optional<double> cycle_time_ms;     // > 0
  std::string timeline_filename;           // written by rank 0 on its host
  std::optional<int> start_timeout;        // seconds, > 0
  bool verbose = false;
  // ps: TensorFlow 2's extra roles. The chief (coordinator) is in the
  // ClusterSpec as "chief"; the evaluator stands outside it (TF's rule) and
  // gets a TF_CONFIG whose task is {"type": "evaluator", "index": 0}.
  int n_chief = 0;      // 0 or 1
  int n_evaluator = 0;  // 0 or 1
  std::string python{};  // every task's interpreter (api/kernel.h, PYTHON); "" = /usr/bin/python3
  // mpi: running workers (ids) to run the ranks on, `slots` each, in rank
  // order; n_workers is their number. Empty: launch n_workers new ones.
  std::vector<std::string> workers{};
  // ps and mpi: after a failure, start every task again (a ps worker task:
  // only that task) up to this many times; the script resumes from its own
  // checkpoint (torchrun's --max-restarts).
  int max_restarts = 0;
  // elastic (horovodrun's --min-np, --max-np, --reset-limit,
  // --blacklist-cooldown-range): the world keeps min_np..max_np ranks
  // (defaults: n_workers); reset_limit bounds the re-formations (unset: no
  // bound); a host that keeps failing is blacklisted for a cooldown drawn in
  // [lo, hi] seconds (unset: for the cluster's life).
  std::optional<int> min_np;
  std::optional<int> max_np;
  std::optional<int> reset_limit;
  std::optional<std::pair<int, int>> blacklist_cooldown_range;
  // torchrun: processes per worker (torchrun --nproc_per_node).
  int nproc_per_node = 1;

  nlohmann::json to_json() const;
};

// Types and ranges only (api/cluster_request.cc); `max_workers` bounds the
// number of tasks. Scripts are checked in form here (check_script_path) and
// resolved in the project directory when the tasks are launched.
Result<ClusterRequest> parse_cluster_request(const nlohmann::json& body, int max_workers);
// The inverse of to_json, for the store (no range checks beyond types).
Result<ClusterRequest> cluster_request_from_json(const nlohmann::json& j);

// mpi: the first rank that failed, as mpirun reported it, with where it ran
// and the last lines it wrote (JSON: Cluster.failed_rank in api/openapi.yaml).
struct RankFailure {
  int rank = 0;
  std::string host;       // its host's IP
  std::string worker_id;  // the worker whose slots it used
  std::optional<int> exit_code;  // 128+signal when killed
  std::optional<int> signal;
  std::string signal_name;  // "Killed"; "" when unknown
  std::string exception;    // its exception line ("KeyError: 'config'"); "" when it raised none
  std::vector<std::string> log_tail;
  // The ranks that failed after it, of its failure: "rank 0 (EngineStopped: ...)".
  std::string then_failed;

  // "rank 1 on 127.0.0.1 (worker ab12c) exited with code 3: KeyError: 'config'" /
  // "... was killed by signal 9 (Killed)".
  std::string describe() const;
  nlohmann::json to_json() const;
  static Result<RankFailure> from_json(const nlohmann::json& j);
};

// One task of the cluster: which worker plays it.
struct ClusterTask {
  std::string type;  // "ps", "chief", "worker", "evaluator"
  int index = 0;
  std::string worker_id;
};

// The cluster object of the REST API (schema Cluster in api/openapi.yaml).
struct Cluster {
  std::string id;
  ClusterRequest request;
  ClusterStatus status = ClusterStatus::kStarting;
  std::vector<ClusterTask> tasks;   // ps, chief, worker, evaluator tasks; index order
  nlohmann::json cluster_spec;      // null until every task registered (ps)
  std::vector<std::string> horovodrun_argv;  // mpi, once the IPs are known
  std::vector<std::string> mpirun_argv;
  std::vector<std::string> torchrun_argv;  // torchrun, once rank 0's address is known
  std::string hostfile;
  std::string reason;
  std::string created_at;
  std::optional<std::string> finished_at;
  std::optional<int> launcher_exit_code;  // mpi launch=true
  std::optional<RankFailure> failed_rank{};  // mpi: set when a rank failed
  // Recoveries (api/cluster_history.h): every generation, how many times the
  // cluster restarted (max_restarts) and its world re-formed (elastic).
  std::vector<ClusterGeneration> generations;
  int restarts = 0;
  int resets = 0;
  // The elastic mode's own record (its world and blacklist), for the store.
  nlohmann::json elastic_state;
  // The worker script as the mode's plan resolved it (canonical, inside the
  // project directory; empty when the request names none), what wire() and
  // replacements run (service/cluster/mode.h). For the store only.
  std::filesystem::path script_path;
  // The running launcher (mpirun), for the store only: {pid, start time};
  // its pgid and session id are its pid. A restarted daemon ends it by this.
  std::optional<base::ProcessId> launcher_process;

  // `workers` as {"ps": [ids], "chief": [id], "worker": [ids], ...} in index order.
  nlohmann::json workers_json() const;
  nlohmann::json to_json() const;       // the API object
  nlohmann::json to_record() const;     // to_json() plus the request, for the store
  static Result<Cluster> from_record(const nlohmann::json& j);
  // "worker 1 (id 3fa9c0)"; torchrun: "worker 1 (id 3fa9c0, ranks 2-3)".
  std::string task_name(const ClusterTask& task) const;
};

}  // namespace muster::api
