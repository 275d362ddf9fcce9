// ClusterManager: clusters of workers for one distributed job (issue 3).
//
// Data path: cluster_routes.cc validates a request and calls create(); the
// manager launches the tasks through the WorkerRegistry (one batch per task
// type, tagged with the cluster id), then drives each cluster from its own
// thread:
//
//   ps mode (rendezvous)
//     a) launch n_ps PS tasks, n_chief chief, n_workers worker and
//        n_evaluator evaluator tasks (the last three run the worker script) with hold +
//        reserve_port: each agent reserves a TCP port on its IP, registers
//        ip:port and waits to be released;
//     b) once every task is running with ip:port, build the ClusterSpec
//        ({"ps": [...], "worker": [...]}, index = launch order) and release
//        every task with TF_CONFIG (its own task type/index) in its env and
//        cluster.json in its working dir; status -> running;
//        (the evaluator stays outside the ClusterSpec, TensorFlow's rule, and
//        gets TF_CONFIG task {"type": "evaluator", "index": 0});
//     c) when the chief succeeded (with a chief: TensorFlow 2's workers and
//        PS serve until stopped), else when every worker task succeeded,
//        stop the rest; -> succeeded;
//     d) any task failing, timing out, lost or stopped, or the rendezvous
//        outlasting timeout_seconds, fails the cluster with a reason naming
//        the task ("worker 1 (id 3fa9c0) failed with exit code 3") and stops
//        every other task. Nobody waits forever.
//   mpi mode
//     a) launch n_workers idle workers; await their IPs;
//     b) build the hosts (workers on one IP share a host: slots add up),
//        hostfile, horovodrun and mpirun lines; -> running;
//     c) launch=true: run the mpirun line as the cluster's launcher process
//        (own process group, log <state>/clusters/<id>/launcher.log); the
//        cluster ends with it (exit 0 -> succeeded, else failed) and its
//        workers are stopped;
//     d) a worker ending while the cluster runs aborts the launcher and fails
//        the cluster naming the worker.
//
// Threads: create/list/get/stop are called from the HTTP threads; one
// manager thread runs step() every `tick` and whenever the registry reports a
// change of a cluster's worker. Registry calls (release, stop) and launcher
// terminations never happen under the manager's mutex, so registry
// listeners can never deadlock with it. The registry, store, clock and
// launcher outlive nothing: the manager owns the launcher, borrows the rest.
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

#include "api/status.h"
#include "service/clock.h"
#include "service/cluster_launcher.h"
#include "service/cluster_store.h"
#include "service/cluster_types.h"
#include "service/registry.h"
#include "service/validation.h"

namespace muster::service {

struct ClusterManagerOptions {
  std::filesystem::path state_dir;         // cluster files: <state_dir>/clusters/<id>/
  ValidationOptions validation;            // project dir (scripts), max workers
  std::filesystem::path ps_program;        // muster-ps; PS tasks run it when it exists
  std::string mpirun = "mpirun";           // argv[0] of the launched line
  std::vector<std::string> mpirun_extra_args;  // added before the command when launching
  std::chrono::milliseconds tick{100};
  std::chrono::milliseconds launcher_grace{3000};
  bool start_thread = true;                // false: tests call step() themselves
};

// The /bin/sh script an mpi cluster with GPUs puts in front of each rank's
// command: it exports CUDA_VISIBLE_DEVICES / NVIDIA_VISIBLE_DEVICES (the
// host's reserved devices) and MUSTER_GPU_DEVICE (the local rank's) from
// MUSTER_RANK_GPUS, then execs the command ("$@").
extern const char* const kRankGpuWrapper;

class ClusterManager {
 public:
  // `store` may be null (tests). Subscribes to the registry.
  ClusterManager(ClusterManagerOptions options, WorkerRegistry& registry, ClusterStore* store, const Clock& clock,
                 std::unique_ptr<Launcher> launcher);
  ~ClusterManager();
  ClusterManager(const ClusterManager&) = delete;
  ClusterManager& operator=(const ClusterManager&) = delete;

  // Loads clusters of an earlier daemon. Those that had not ended are failed
  // ("the daemon restarted ...") and their remaining tasks stopped.
  api::Status restore();

  // Validates the scripts, launches every task (all or nothing) and returns
  // the cluster in status "starting".
  api::Result<Cluster> create(const ClusterRequest& request);
  std::vector<Cluster> list() const;
  api::Result<Cluster> get(const std::string& id) const;
  // Stops the launcher and every task; a cluster that already ended is
  // returned as it is.
  api::Result<Cluster> stop(const std::string& id);
  // The log GET /api/v1/clusters/{id}/logs serves: mpi mode with launch=true,
  // the launcher's (<state>/clusters/<id>/launcher.log, mpirun's combined
  // output; it may not exist yet); ps mode, the chief's (worker task 0's)
  // worker log. An empty path when the cluster has no such log (mpi with
  // launch=false). not_found for an unknown cluster.
  api::Result<std::filesystem::path> log_path(const std::string& id) const;

  // One pass over the active clusters (the manager thread calls it).
  void step();

  // Called with the cluster on every change that is persisted (status,
  // ClusterSpec, launch lines, reason). Listeners run under the manager's
  // mutex: they must only copy or queue (the dashboard's EventHub writes to
  // non-blocking streams), never call back into the manager.
  using Listener = std::function<void(const Cluster&)>;
  int subscribe(Listener listener);
  void unsubscribe(int handle);

 private:
  struct Entry {
    Cluster cluster;
    uint64_t seq = 0;
    bool launched = false;        // tasks are known
    bool ending = false;          // finish() is stopping the tasks; status follows
    TimePoint deadline = TimePoint::max();
    std::unique_ptr<LauncherProcess> launcher;
    std::filesystem::path dir;    // <state_dir>/clusters/<id>
  };

  void evaluate(const std::string& id);
  // Ends the cluster once (first caller wins): stops the launcher and every
  // task that has not ended, then sets the terminal status, so a cluster
  // seen as ended has nothing left running. A second caller waits for that.
  void finish(const std::string& id, ClusterStatus status, const std::string& reason);
  api::Status rendezvous_ps(const std::string& id, const std::vector<api::Worker>& workers);
  api::Status rendezvous_mpi(const std::string& id, const std::vector<api::Worker>& workers);
  void persist_locked(const Entry& e);
  void loop();

  ClusterManagerOptions options_;
  WorkerRegistry& registry_;
  ClusterStore* store_;
  const Clock& clock_;
  std::unique_ptr<Launcher> launcher_;

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
