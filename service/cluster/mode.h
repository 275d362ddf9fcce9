// ClusterMode: what one cluster mode does with its tasks, behind the
// ClusterManager (which is the same for every mode). One implementation per
// mode: PsMode (ps_mode.h: ClusterSpec and TF_CONFIG), MpiMode
// (mpi_mode.h: hostfile, horovodrun/mpirun lines, running mpirun),
// TorchrunMode (torchrun_mode.h: torchrun's environment for every rank) and
// ElasticMode (elastic_mode.h: ranks released into the world rendezvous of
// service/elastic/world.h, replaced as they die).
//
// Contract
// - plan() turns a validated request into the launch batches, in task order
//   (the order gives each task its index), with their task type; scripts are
//   resolved here, once, so a bad one launches nothing. Errors name the
//   field. A batch may name running workers instead (TaskBatch::existing):
//   they are the cluster's tasks but not its own, so it never stops them.
//   Every task a batch launches carries its cluster (LaunchBatch::cluster_id
//   and MUSTER_CLUSTER_ID: task_batch(), tasks.h). Plan::script_path (the
//   worker script, resolved) is kept on the cluster by the manager
//   (api::Cluster::script_path): wire() and a mode's replacements run that
//   path and never resolve the script again.
// - ready(w): the task counts as registered (the manager waits for every
//   task to be ready before wire()). Default: api::is_reachable(w) (running,
//   its address registered); a mode that reserves ports wants the port too.
// - may_end(task, w): a task that reached a terminal status without ending
//   the cluster (ps: a worker task that succeeded). Any other ending fails
//   the cluster, naming the task.
// - wire() runs once, when every task is ready. It does the mode's own side
//   effects (writing the hostfile, starting mpirun) and returns what the
//   manager records and whom it releases; the manager persists the record,
//   marks the cluster running and then sends the releases. An error fails
//   the cluster with its message (nothing it started is left running).
// - verdict(): while running, whether the cluster ended and how (nullopt:
//   not yet). `launcher_exit` is the launcher's exit code once it ended.
// - log(): where GET /clusters/{id}/logs reads.
// Recovery (defaults: none, the manager's max_restarts rule applies):
// - replaceable(cluster, task): under max_restarts, a task that failed is replaced
//   alone under the same index and release (ps: a worker task) instead of
//   the whole cluster restarting.
// - supervise(): a mode that handles its running tasks' endings itself
//   (elastic: its world re-forms, replacements are launched) does it here,
//   on every pass while the cluster runs; it may change the copy's tasks,
//   generations, resets and elastic_state, which the manager stores. Its
//   may_end() then lets every ending through.
// - endings(): how the tasks still running end with the cluster (their
//   status and exit code; default `stopped`).
// - ended(): the cluster ended (any way); resume(): a restarted daemon
//   found the cluster running: true when the mode takes it back (its
//   agents come back to the new daemon), false to fail it.
// Threads: plan() is called from HTTP threads, the rest from the manager's
// thread; never under the manager's mutex, so they may call the registry.
#pragma once

#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "api/cluster.h"
#include "api/status.h"
#include "api/worker.h"
#include "service/cluster/launcher.h"
#include "service/registry/registry.h"

namespace muster::service {

// One batch of tasks of one type ("ps", "chief", "worker", "evaluator").
// With `existing`, running workers play these tasks and `batch` is not
// launched (mpi on the notebook's own workers); the cluster never stops them.
struct TaskBatch {
  std::string type;
  LaunchBatch batch;
  std::vector<std::string> existing{};
};

// What plan() hands the manager.
struct Plan {
  std::vector<TaskBatch> batches;
  // The worker script as resolved (canonical, inside the project directory);
  // empty when the request names none.
  std::filesystem::path script_path;
};

// What wire() hands the manager.
struct Wiring {
  nlohmann::json cluster_spec;                   // ps: the ClusterSpec
  std::vector<std::string> horovodrun_argv;      // mpi
  std::vector<std::string> mpirun_argv;          // mpi: the line shown, one a user can run (the launched
                                                 // one puts each rank's exit report in front of its command)
  std::vector<std::string> torchrun_argv;        // torchrun: the line every node would run
  std::string hostfile;                          // mpi
  std::unique_ptr<LauncherProcess> launcher;     // mpi with launch=true
  std::vector<std::pair<std::string, Release>> releases;  // worker id -> its release
  std::string summary;                           // for the daemon's log line
};

struct Verdict {
  api::ClusterStatus status = api::ClusterStatus::kFailed;
  std::string reason;
  std::optional<api::RankFailure> failed_rank{};  // mpi: the first rank that failed, when known
};

// What a supervising mode asks of the manager after a pass.
struct Supervision {
  std::vector<std::string> stop;   // workers to end (left out of the world, on a blacklisted host)
  std::optional<Verdict> verdict;  // the cluster ended
  bool changed = false;            // the copy's tasks or history changed: store them
};

// A file (the launcher's log), a worker whose log it is, or neither.
struct LogSource {
  std::filesystem::path file;
  std::string worker_id;
};

class ClusterMode {
 public:
  virtual ~ClusterMode() = default;
  virtual api::Result<Plan> plan(const std::string& cluster_id, const api::ClusterRequest& request) = 0;
  virtual bool ready(const api::Worker& worker) const { return api::is_reachable(worker); }
  virtual bool may_end(const api::ClusterTask& task, const api::Worker& worker) const = 0;
  virtual api::Result<Wiring> wire(const api::Cluster& cluster, const std::vector<api::Worker>& workers) = 0;
  virtual std::optional<Verdict> verdict(const api::Cluster& cluster, const std::vector<api::Worker>& workers,
                                         std::optional<int> launcher_exit) const = 0;
  virtual LogSource log(const api::Cluster& cluster) const = 0;

  virtual bool replaceable(const api::Cluster& /*cluster*/, const api::ClusterTask& /*task*/) const { return false; }
  virtual Supervision supervise(api::Cluster& /*cluster*/, const std::vector<api::Worker>& /*workers*/) { return {}; }
  virtual void ended(const api::Cluster& /*cluster*/) {}
  // How the tasks still running end when the cluster ends with `status`
  // (default: `stopped`); mpi: the hosts end as their ranks did. `workers`
  // are every task's, in task order.
  virtual std::map<std::string, WorkerRegistry::Ending> endings(const api::Cluster& /*cluster*/,
                                                                api::ClusterStatus /*status*/,
                                                                const std::vector<api::Worker>& /*workers*/) const {
    return {};
  }
  virtual bool resume(api::Cluster& /*cluster*/) { return false; }
};

}  // namespace muster::service
