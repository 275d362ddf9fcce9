// TorchrunMode: the torchrun mode of clusters (PyTorch's
// torch.distributed / DistributedDataParallel scripts), behind the
// ClusterMode interface (mode.h). What torchrun's agent does on each
// node, musterd does for the whole cluster:
//
//   a) plan: n_workers held tasks (the nodes), each reserving a port and
//      running the worker script once released; the script must resolve in
//      the project directory.
//   b) wire, once every task registered ip:port: worker 0's address and
//      reserved port become MASTER_ADDR / MASTER_PORT (free on rank 0's
//      host: its agent held the port until the script started), the cluster
//      id TORCHELASTIC_RUN_ID; each task is released with torchrun's
//      environment (clusterspec/torchrun.h), as one process or, with
//      nproc_per_node > 1, as that many processes of the agent (the
//      release's `processes`, each with its RANK / LOCAL_RANK / ROLE_RANK).
//      The request's own OMP_NUM_THREADS wins over torchrun's default of 1.
//      GLOO_SOCKET_IFNAME, NCCL_SOCKET_IFNAME and MUSTER_COMM_TCP_IFACE are
//      set by each agent to the interface of the address it registered
//      (Release::interface_env), unless the worker's environment has them:
//      a container's hostname may resolve to loopback, where gloo would
//      otherwise listen.
//      The equivalent torchrun line (every node's) is recorded for display.
//   c) verdict: succeeded once every task succeeded (a node that finished
//      may end early); any task failing, lost or stopped fails the cluster
//      naming it and its ranks (the manager's step d), api::Cluster::task_name).
//   d) log: worker 0's log (rank 0's output).
//
// Restarts (max_restarts) are the cluster manager's, common to every mode:
// this mode only carries the count into TORCHELASTIC_MAX_RESTARTS and the
// line.
#pragma once

#include <filesystem>

#include "service/cluster/mode.h"

namespace muster::service {

struct TorchrunModeOptions {
  std::filesystem::path project_dir;  // canonical: scripts resolve inside it
};

class TorchrunMode final : public ClusterMode {
 public:
  explicit TorchrunMode(TorchrunModeOptions options) : options_(std::move(options)) {}

  api::Result<Plan> plan(const std::string& cluster_id, const api::ClusterRequest& request) override;
  // Reachable, and its reserved port registered with it.
  bool ready(const api::Worker& worker) const override { return api::is_reachable(worker) && worker.port.has_value(); }
  bool may_end(const api::ClusterTask& task, const api::Worker& worker) const override;
  api::Result<Wiring> wire(const api::Cluster& cluster, const std::vector<api::Worker>& workers) override;
  std::optional<Verdict> verdict(const api::Cluster& cluster, const std::vector<api::Worker>& workers,
                                 std::optional<int> launcher_exit) const override;
  LogSource log(const api::Cluster& cluster) const override;

 private:
  TorchrunModeOptions options_;
};

}  // namespace muster::service
