// ClusterManager: clusters of workers for one distributed job.
//
// Data path: routes.cc validates a request (api/cluster.h) and calls
// create(); the manager asks the request's ClusterMode (mode.h: PsMode,
// MpiMode, TorchrunMode, ElasticMode) for the launch batches,
// launches them through the WorkerRegistry (one batch per task type, tagged with the cluster id,
// all or nothing), then drives each cluster from its own thread, the same
// for every mode:
//
//   a) starting: wait until every task is ready (ClusterMode::ready); a
//      wait outlasting timeout_seconds fails the cluster naming the
//      first task that is not;
//   b) all ready: ClusterMode::wire() (ps: ClusterSpec and releases; mpi:
//      hostfile, launch lines, mpirun); the manager records what it
//      returned, persists the cluster as running, then sends the releases;
//   c) running: ClusterMode::verdict() decides when the cluster succeeded or
//      failed (ps: the chief or every worker succeeded; mpi: mpirun's exit);
//      the rest is stopped;
//   d) any task failing, timing out, lost or stopped (unless the mode lets
//      it end: ClusterMode::may_end) fails the cluster with a reason naming
//      the task ("worker 1 (id 3fa9c0) failed with exit code 3") and stops
//      every other task and the launcher. Nobody waits forever.
//   e) unless restarts are left (max_restarts, torchrun's semantics, ps and
//      mpi modes): then a failed task the mode can replace alone
//      (ClusterMode::replaceable: a ps worker) is relaunched under the same
//      index and released with its own release once it registers;
//      otherwise (a task that is not replaceable, or mpirun failing) the
//      launcher and every task are stopped, every task is launched again
//      (MUSTER_RESTART_COUNT in its env) and a)-b) run again. Each restart
//      is a generation of the cluster (api/cluster_history.h).
//   f) a mode that supervises its running tasks itself (elastic: its world
//      re-forms, replacements join) does so on every pass
//      (ClusterMode::supervise); the manager stores what it changed, stops
//      what it asks and ends the cluster on its verdict.
//
// Threads: create/list/get/stop are called from the HTTP threads; one
// manager thread runs step() every `tick` and whenever the registry reports a
// change of a cluster's worker. Registry calls (release, stop), mode
// calls and launcher terminations never happen under the manager's mutex,
// so registry listeners can never deadlock with it. The registry, store,
// clock and MpiHosts are borrowed; the manager owns the launcher and the
// cluster modes.
//
// Files: manager.cc (construction, create, the queries, stop),
// lifecycle.cc (the thread's pass a) to f), the wiring, finish,
// restore; which failed task is the root cause: failed_tasks.h), restarts.cc (e: restarts and replaced tasks),
// retention.cc (remove, retention).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "api/cluster.h"
#include "api/status.h"
#include "service/clock.h"
#include "service/cluster/launcher.h"
#include "service/cluster/store.h"
#include "service/elastic/world.h"
#include "service/cluster/mode.h"
#include "service/registry/registry.h"
#include "service/cluster/elastic_mode.h"
#include "service/validation.h"
#include "workers/mpi_hosts.h"

namespace muster::service {

// How long a failed cluster waits for its root cause when every task that
// ended so far failed of a peer's failure and a task still runs (the rank
// that raised may still be printing its traceback).
inline constexpr std::chrono::seconds kRootCauseGrace{5};

struct ClusterManagerOptions {
  std::filesystem::path state_dir;         // cluster files: <state_dir>/clusters/<id>/
  ValidationOptions validation;            // project dir (scripts), max workers
  std::filesystem::path ps_program;        // muster-ps; PS tasks run it when it exists
  std::string mpirun = "mpirun";           // argv[0] of the launched line
  std::vector<std::string> mpirun_extra_args;  // added before the command when launching
  std::chrono::milliseconds tick{100};
  std::chrono::milliseconds launcher_grace{3000};
  // Elastic clusters: a member of a broken generation that has not joined
  // the next one by then is left out (service/elastic/world.h).
  std::chrono::milliseconds elastic_rejoin_timeout{30'000};
  bool start_thread = true;                // false: tests call step() themselves
  // Finished clusters (with their workers and files) are forgotten once
  // older than retain_for, or beyond the newest max_finished
  // (retention.cc; musterd --retain-finished, --max-finished-clusters).
  std::chrono::seconds retain_for{std::chrono::hours(24 * 7)};
  size_t max_finished = 1000;
};

class ClusterManager {
 public:
  // `store` may be null (tests). `mpi_hosts`: how mpirun reaches the
  // backend's hosts (workers::mpi_hosts_of); null for workers on this host.
  // Subscribes to the registry.
  ClusterManager(ClusterManagerOptions options, WorkerRegistry& registry, ClusterStore* store, const Clock& clock,
                 std::unique_ptr<Launcher> launcher, workers::MpiHosts* mpi_hosts = nullptr);
  ~ClusterManager();
  ClusterManager(const ClusterManager&) = delete;
  ClusterManager& operator=(const ClusterManager&) = delete;

  // Loads clusters of an earlier daemon. Those that had not ended are failed
  // ("the daemon restarted ...") and their remaining tasks stopped, unless
  // their mode takes them back (ClusterMode::resume: a running elastic
  // cluster, whose agents come back to this daemon).
  api::Status restore();

  // Validates the scripts, launches every task (all or nothing, and admitted
  // as one: WorkerRegistry::launch_together) and returns the cluster in
  // status "starting". `warnings`, when given, receives the registry's
  // (the host overcommitted, or the tasks waiting for room).
  api::Result<api::Cluster> create(const api::ClusterRequest& request, std::vector<std::string>* warnings = nullptr);
  std::vector<api::Cluster> list() const;
  api::Result<api::Cluster> get(const std::string& id) const;
  // Stops the launcher and every task; a cluster that already ended is
  // returned as it is.
  api::Result<api::Cluster> stop(const std::string& id);
  // The log GET /api/v1/clusters/{id}/logs serves: mpi mode with launch=true,
  // the launcher's (<state>/clusters/<id>/launcher.log, mpirun's combined
  // output; it may not exist yet); ps mode, the chief's (worker task 0's)
  // worker log. An empty path when the cluster has no such log (mpi with
  // launch=false). not_found for an unknown cluster.
  api::Result<std::filesystem::path> log_path(const std::string& id) const;

  // DELETE of a finished cluster: its record, its workers (registry
  // remove_finished) and its directory. not_found, or conflict while it runs.
  api::Status remove(const std::string& id);
  // Retention (see ClusterManagerOptions); the manager thread calls it about
  // once a second.
  void apply_retention();

  // One pass over the active clusters (the manager thread calls it).
  void step();

  // The world rendezvous of the elastic cluster `worker_id` is a rank of
  // (the rendezvous routes); not_found for any other worker.
  api::Result<std::shared_ptr<elastic::World>> world_of_worker(const std::string& worker_id) const;

  // Called with the cluster on every change that is persisted (status,
  // ClusterSpec, launch lines, reason). Listeners run under the manager's
  // mutex: they must only copy or queue (the dashboard's EventHub writes to
  // non-blocking streams), never call back into the manager.
  using Listener = std::function<void(const api::Cluster&)>;
  int subscribe(Listener listener);
  void unsubscribe(int handle);

 private:
  struct Entry {
    api::Cluster cluster;
    uint64_t seq = 0;
    bool launched = false;        // tasks are known
    bool ending = false;          // finish() is stopping the tasks; status follows
    bool wired = false;           // b) ran for the current tasks (again after a restart)
    bool restarting = false;      // restart() is stopping and relaunching the tasks
    TimePoint deadline = TimePoint::max();
    TimePoint wired_at;
    std::optional<TimePoint> restart_began;
    // What each task was released with (ps: its TF_CONFIG), for a
    // replacement of that task; and replacements waiting for their release
    // (new worker -> the worker it replaces). In memory only.
    std::map<std::string, Release> releases;
    std::map<std::string, std::string> pending_release;
    TimePoint finished{};         // when it ended (retention), monotonic
    // When a pass first found a task ended badly whose failure reads as a
    // peer's: the root cause is waited for until kRootCauseGrace after it.
    std::optional<TimePoint> failure_seen;
    std::unique_ptr<LauncherProcess> launcher;
    std::filesystem::path dir;    // <state_dir>/clusters/<id>
  };

  void evaluate(const std::string& id);
  // Ends the cluster once (first caller wins): stops the launcher and every
  // task that has not ended, then sets the terminal status, so a cluster
  // seen as ended has nothing left running. A second caller waits for that.
  void finish(const std::string& id, api::ClusterStatus status, const std::string& reason,
              std::optional<api::RankFailure> failed_rank = std::nullopt);
  ClusterMode& mode_of(const api::ClusterRequest& request) const;
  // b): wires a cluster whose tasks are all ready (ClusterMode::wire).
  void wire(const api::Cluster& cluster, const std::vector<api::Worker>& workers);
  // e) (restarts.cc): every task again, or task `index` alone.
  void restart(const std::string& id, const std::string& reason, std::optional<size_t> failed_task);
  void replace_task(const std::string& id, size_t index, const std::string& reason);
  // f): the mode's pass over a running cluster; true when it ended it.
  bool supervise(const std::string& id, const api::Cluster& cluster, const std::vector<api::Worker>& workers);
  // The mode's batches again (a new plan), with MUSTER_RESTART_COUNT;
  // launched all or nothing.
  struct Relaunched {
    std::vector<api::ClusterTask> tasks;
    std::filesystem::path script_path;  // the new plan's (Plan::script_path)
  };
  api::Result<Relaunched> relaunch(const api::Cluster& cluster, int restart_count, std::optional<size_t> only_task);
  void persist_locked(const Entry& e);
  void loop();

  ClusterManagerOptions options_;
  WorkerRegistry& registry_;
  ClusterStore* store_;
  const Clock& clock_;
  std::unique_ptr<Launcher> launcher_;
  std::unique_ptr<ClusterMode> ps_;
  std::unique_ptr<ClusterMode> mpi_;
  std::unique_ptr<ElasticMode> elastic_;
  std::unique_ptr<ClusterMode> torchrun_;

  mutable std::mutex mu_;
  std::condition_variable ended_cv_;  // an `ending` cluster reached its status
  std::map<std::string, Entry> clusters_;
  uint64_t next_seq_ = 1;

  std::mutex listeners_mu_;
  std::map<int, Listener> listeners_;
  int next_listener_ = 1;

  int subscription_ = 0;
  std::mutex wake_mu_;
  std::condition_variable wake_cv_;
  bool wake_ = false;
  bool quit_ = false;
  std::thread thread_;
};

}  // namespace muster::service
