// MpiMode: the mpi mode of clusters (Horovod / Open MPI), behind the
// ClusterMode interface (mode.h).
//
//   a) plan: n_workers idle workers (they wait to be stopped), or the
//      request's `workers` (running workers the notebook launched, as
//      `horovodrun -H` names them: each must be running with an IP); the
//      worker script must resolve in the project directory.
//   b) wire, once every worker registered its IP: the hosts (workers on one
//      IP share a host, their slots add up); the preflight of the backend's
//      hosts (workers::MpiHosts, handed to the manager explicitly), whose
//      --prefix, interfaces and rsh agent go on the line; the hostfile
//      (written to <state>/clusters/<id>/hostfile) and the horovodrun and
//      mpirun argument vectors; with launch=true, mpirun started through the
//      Launcher (own session, log <state>/clusters/<id>/launcher.log) with
//      its environment in its spawn options: the request's env, the cluster
//      id and rank 0's metrics credentials.
//   c) verdict: the cluster ends with mpirun (exit 0 -> succeeded, else
//      failed naming the first rank that failed, its host, worker and exit
//      code or signal, as mpirun reports it, with its last lines:
//      Cluster::failed_rank; cluster/mpi_output.h reads them). Every worker must
//      stay up.
//   d) log: the launcher's log (none with launch=false).
//
// Every rank runs the worker script by api/kernel.h's rules, the same the
// agent runs a worker's script with (rank_command()).
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "clusterspec/hostfile.h"
#include "service/cluster/mode.h"
#include "workers/mpi_hosts.h"

namespace muster::service {

struct MpiModeOptions {
  std::filesystem::path state_dir;             // cluster files: <state_dir>/clusters/<id>/
  std::filesystem::path project_dir;           // canonical: scripts resolve inside it; mpirun's cwd
  std::string mpirun = "mpirun";               // argv[0] of the launched line
  std::vector<std::string> mpirun_extra_args;  // added before the command when launching
};

// The /bin/sh script an mpi cluster with GPUs puts in front of each rank's
// command: it exports CUDA_VISIBLE_DEVICES / NVIDIA_VISIBLE_DEVICES (the
// host's reserved devices) and MUSTER_GPU_DEVICE (the local rank's) from
// MUSTER_RANK_GPUS, then execs the command ("$@").
extern const char* const kRankGpuWrapper;

// The /bin/sh script in front of every launched rank's command (outside the
// GPU wrapper): it runs the command and reports an exit other than 0 on the
// rank's stderr ("muster: rank R exited with code N" / "... was killed by
// signal S", read by first_failed_rank(), cluster/mpi_output.h), ending as the
// command did.
extern const char* const kRankExitWrapper;

// The command every rank runs for `script_path` (api/kernel.h, kernel python3
// with the request's `python`).
std::vector<std::string> rank_command(const std::filesystem::path& script_path, const std::vector<std::string>& args,
                                      const std::string& python = "");

class MpiMode final : public ClusterMode {
 public:
  // `mpi_hosts` null: the workers run on the daemon's host (mpirun's
  // defaults reach it). `registry`, `launcher` and `mpi_hosts` are borrowed.
  MpiMode(MpiModeOptions options, WorkerRegistry& registry, Launcher& launcher,
                workers::MpiHosts* mpi_hosts);

  api::Result<Plan> plan(const std::string& cluster_id, const api::ClusterRequest& request) override;
  bool may_end(const api::ClusterTask& task, const api::Worker& worker) const override;
  api::Result<Wiring> wire(const api::Cluster& cluster, const std::vector<api::Worker>& workers) override;
  std::optional<Verdict> verdict(const api::Cluster& cluster, const std::vector<api::Worker>& workers,
                                 std::optional<int> launcher_exit) const override;
  LogSource log(const api::Cluster& cluster) const override;
  // A restarted daemon takes a running cluster back: its hosts' agents come
  // back as every worker's do, and its job (launch=true) ran on under
  // muster-launcher, which the manager adopts by the recorded identity.
  bool resume(api::Cluster& cluster) override;
  // The workers (not the notebook's own) end as their ranks did: `succeeded`
  // with a cluster that succeeded; a host whose ranks reported an exit other
  // than 0 `failed` with the first such code; the rest `stopped`.
  std::map<std::string, WorkerRegistry::Ending> endings(const api::Cluster& cluster, api::ClusterStatus status,
                                                        const std::vector<api::Worker>& workers) const override;

 private:
  // Where global rank `rank` ran: its host's IP and the worker whose slots
  // it used (mpirun's mapping by slot over -H); "" when out of range.
  std::pair<std::string, std::string> place_rank(const api::Cluster& cluster, const std::vector<api::Worker>& workers,
                                                 int rank) const;
  std::string read_launcher_log(const api::Cluster& cluster) const;
  std::filesystem::path dir_of(const std::string& cluster_id) const;
  std::optional<api::RankFailure> failed_rank(const api::Cluster& cluster,
                                              const std::vector<api::Worker>& workers) const;
  api::Result<std::unique_ptr<LauncherProcess>> start_mpirun(const api::Cluster& cluster,
                                                             const std::vector<api::Worker>& workers,
                                                             const std::vector<std::string>& mpirun);

  MpiModeOptions options_;
  WorkerRegistry& registry_;
  Launcher& launcher_;
  workers::MpiHosts* mpi_hosts_;
};

}  // namespace muster::service
