// KubernetesBackend: every worker is one Pod on a Kubernetes cluster,
// through the API server's REST interface (api_client.h).
//
// Contract (on top of workers/backend.h)
// - launch() creates per worker a Secret (the agent token) and a Pod
//   (pod_manifest.h). The tasks of one cluster (the specs that share
//   MUSTER_CLUSTER_ID) are a gang (gang.h): with `gang` on (the default)
//   their pods are created only once all of them fit on the nodes' free
//   room; until then launch() has returned ok and poll() answers kPending
//   "waiting for the whole group of N to fit: ...". A plain worker's pod is
//   created at once and queues in the Kubernetes scheduler. All-or-nothing:
//   if any create fails, the pods and Secrets already created for the call
//   (or for the gang, when a held gang is created later) are deleted and the
//   error names the worker; a held gang that fails so answers kExited
//   `failed` with the reason.
// - One watch on the daemon's pods (labelSelector muster.io/daemon=<id>):
//   a list gives the cache and its resourceVersion, a watch from there keeps
//   it current, a 410 Gone (the version is too old) lists again, and a
//   broken watch reconnects with backoff (0.5 s doubling to 10 s). poll()
//   answers from that cache (pod_state.h), never with a request.
// - A pod deleted outside muster, or on a node whose Ready condition is not
//   True (nodes are listed every poll_interval), is kLost with outcome
//   `lost` and a reason naming the pod and the node.
// - stop() is DELETE with gracePeriodSeconds = the grace (the kubelet sends
//   SIGTERM, then SIGKILL); it returns at once and is idempotent. A held
//   gang's worker just leaves the gang.
// - Logs: once the agent's container started, a thread per pod follows
//   `log?follow=true&timestamps=true` into LaunchSpec::log_path through
//   base::RotatingLog with log_limits (the pod's env has no MUSTER_LOG_*),
//   reconnecting from the last timestamp seen, so the log is the daemon's
//   and outlives the pod. The kubelet's stream trails the agent's exit
//   report and ends only with the container, so log_complete() is false
//   for a pod with a followed log until its stream ended after the pod did
//   (or the pod is gone): the registry holds the worker's reported exit
//   until then (workers/backend.h). A pod that ended is deleted (with its
//   Secret) once its log is read to the end, unless keep_finished_pods.
// - process_identity() is {"pod","uid","log","max_bytes","keep"}; adopt()
//   takes it back: a restarted daemon finds its pods in its first list (by
//   label) and follows their logs again from where the last one stopped
//   (<state>/kubernetes/logs/<worker>.since); a pod that is gone by then is
//   kLost. Pods outlive the daemon: shutdown() ends the watch and log
//   threads and deletes nothing (as the slurm and ssh backends leave their
//   jobs; the registry keeps the workers for the next daemon).
// - mpi clusters (MpiHosts): preflight_mpi() maps each host address to
//   its pod and hands mpirun `muster-kube-rsh <map>` as its rsh agent,
//   which starts Open MPI's daemon in the pod's agent container with
//   `kubectl exec` (kubernetes_mpi.cc): no sshd in the pods.
// - The daemon id labels every pod: --backend-opt daemon_id, else made once
//   (8 random hex digits) and kept in <state>/kubernetes/daemon-id, so it is
//   stable across restarts of one state dir and distinct between daemons
//   sharing a namespace.
//
// Threads: any method from any thread; one mutex guards the cache, API
// calls are made without it. With start_threads off (unit tests) no thread
// runs and the tests drive relist(), watch_once(), housekeeping() and
// follow_log() themselves.
#pragma once

#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "workers/backend.h"
#include "workers/kubernetes/api_client.h"
#include "workers/mpi_hosts.h"
#include "workers/kubernetes/gang.h"
#include "workers/kubernetes/kubernetes_options.h"

namespace muster::workers::kubernetes {

class KubernetesBackend final : public Backend, public MpiHosts {
 public:
  static api::Result<std::unique_ptr<KubernetesBackend>> create(KubernetesOptions options,
                                                                std::unique_ptr<ApiClient> client);
  ~KubernetesBackend() override;

  std::string name() const override { return "kubernetes"; }
  std::string master_address() const override { return options_.master_address; }
  bool queues_workers() const override { return true; }
  api::Status launch(const std::vector<LaunchSpec>& specs) override;
  api::Status stop(const std::string& worker_id, std::chrono::milliseconds grace) override;
  ProcessStatus poll(const std::string& worker_id) override;
  std::string process_identity(const std::string& worker_id) override;
  void adopt(const std::string& worker_id, const std::string& identity) override;
  bool log_complete(const std::string& worker_id) override;
  void forget(const std::string& worker_id) override;
  void shutdown() override;
  api::Result<MpiLaunchSettings> preflight_mpi(const MpiHostsRequest& request) override;

  const std::string& daemon_id() const { return daemon_id_; }

  // The steps the background threads run, public for the unit tests.
  // GET the daemon's pods: the cache (pods gone from it are deleted) and the
  // resourceVersion to watch from.
  api::Status relist();
  // One watch from the kept resourceVersion until the server ends it, a 410
  // Gone (then relist()), or shutdown.
  api::Status watch_once();
  // Nodes' health, the held gangs that fit now, finished pods to delete.
  void housekeeping();
  // Follows one pod's log into its log file until the stream ends.
  void follow_log(const std::string& worker_id);

 private:
  struct Pod;
  struct Gang {
    std::vector<LaunchSpec> specs;
    std::string reason;
  };
  KubernetesBackend(KubernetesOptions options, std::unique_ptr<ApiClient> client);
  std::string pods_path() const;
  api::Status create_pods(const std::vector<LaunchSpec>& specs);
  void delete_pod(const std::string& worker_id, std::optional<long> grace_seconds);
  void apply_pod(const nlohmann::json& pod);
  void apply_deleted(const nlohmann::json& pod);
  bool fit_now(const std::vector<LaunchSpec>& specs, std::string* reason);
  void start_log_locked(Pod& pod);
  void watch_loop();
  void housekeeping_loop();
  void log_loop(std::string worker_id);

  KubernetesOptions options_;
  std::unique_ptr<ApiClient> client_;
  std::string daemon_id_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, std::unique_ptr<Pod>> pods_;  // by worker id
  std::vector<Gang> held_;                            // gangs that do not fit yet, in launch order
  std::map<std::string, std::string> not_ready_;      // node -> why it is not Ready
  std::string resource_version_;
  bool listed_ = false;   // the first list came back (adopted pods not in it are gone)
  bool shut_down_ = false;
  std::thread watcher_, housekeeper_;
  std::map<std::string, std::thread> log_threads_;
};

}  // namespace muster::workers::kubernetes
