// SlurmBackend: every worker is one Slurm batch job on a real cluster.
//
// Why one job per worker (not an array or a heterogeneous job): muster's
// workers are stopped, polled and fail one by one (stop_workers(id), a lost
// worker fails its cluster by name), and Slurm gives each job its own state,
// reason, exit code and scancel; an array would share one submission's
// resources request and a heterogeneous job starts all-or-nothing only when
// every component fits, which turns "2 of 3 workers running" into a silent
// wait. Gang semantics for clusters come from the cluster side (held tasks
// are released only once every task registered).
//
// Contract (on top of workers/backend.h)
// - launch() writes each worker's batch script (0700, in its working dir: it
//   carries the agent token) and submits it with sbatch: --cpus-per-task =
//   ceil(cpu), --mem = ceil(memory GiB * 1024) MB, --gres=gpu:k, and the
//   partition/account/QOS/time limit from the options. All-or-nothing: if one
//   submission fails, the jobs already submitted are cancelled.
// - queues_workers() is true: poll() answers kPending with Slurm's reason
//   ("queued in Slurm as job 12 (Resources)") until the job starts; terminal
//   job states map as job_state.h says; a running job whose node Slurm
//   reports DOWN or NOT_RESPONDING is kLost naming the node.
// - poll() never runs a command: a poller thread asks squeue (one call for
//   all live jobs) and sinfo every poll_interval and poll() reads its cache.
// - stop() is scancel (Slurm signals the job and kills it after KillWait).
// - worker id -> job id is kept in <state-dir>/slurm/jobs.json, so a restarted
//   daemon re-adopts the jobs of the workers it restores. Jobs outlive the
//   daemon (cancel_on_shutdown=1 cancels them at shutdown instead).
// - Workers reach the daemon at `master_address` (required: the daemon host's
//   address on the cluster network); their logs are written by Slurm to the
//   worker's log path, so the state dir must be on a filesystem the nodes
//   share with the daemon's host (as home and project directories are on
//   Slurm sites).
#pragma once

#include <condition_variable>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "workers/backend.h"
#include "workers/mpi_hosts.h"
#include "workers/slurm/slurm_client.h"

namespace muster::workers::slurm {

struct SlurmOptions {
  std::filesystem::path state_dir;  // the daemon's; jobs.json lives in state_dir/slurm
  std::string master_address;       // required
  std::string partition, account, qos, time_limit;
  std::chrono::milliseconds poll_interval{1000};
  std::filesystem::path rsh_agent;  // muster-slurm-rsh; default: beside the running program
  bool cancel_on_shutdown = false;

  // From --backend-opt key=value: master_address, partition, account, qos,
  // time (a Slurm time limit, e.g. 2:00:00), poll_ms, cancel_on_shutdown.
  static api::Result<SlurmOptions> from_map(const std::filesystem::path& state_dir,
                                            const std::map<std::string, std::string>& opts);
};

class SlurmBackend final : public Backend, public MpiHosts {
 public:
  static api::Result<std::unique_ptr<SlurmBackend>> create(SlurmOptions options, std::unique_ptr<SlurmClient> client);
  ~SlurmBackend() override;

  std::string name() const override { return "slurm"; }
  std::string master_address() const override { return options_.master_address; }
  bool queues_workers() const override { return true; }
  api::Status launch(const std::vector<LaunchSpec>& specs) override;
  api::Status stop(const std::string& worker_id, std::chrono::milliseconds grace) override;
  ProcessStatus poll(const std::string& worker_id) override;
  // Drops the worker's job from the cache and from jobs.json.
  void forget(const std::string& worker_id) override;
  void shutdown() override;
  // mpirun reaches the nodes through Slurm instead of ssh: every host must
  // be a node running one of this backend's jobs; the answer's rsh_agent is
  // muster-slurm-rsh with a map host -> (job, node), which starts orted with
  // `srun --jobid=<job> --overlap` inside that job.
  api::Result<MpiLaunchSettings> preflight_mpi(const MpiHostsRequest& request) override;

  // The Slurm job id of a worker ("" if none).
  std::string job_of(const std::string& worker_id) const;
  // Asks squeue/sinfo now instead of waiting for the poller (tests).
  void refresh();

 private:
  struct Job {
    std::string id;
    std::optional<JobInfo> info;  // empty until squeue first answered
    bool final = false;           // a terminal state was seen: no more queries
  };
  SlurmBackend(SlurmOptions options, std::unique_ptr<SlurmClient> client);
  api::Status save_locked() const;
  void poll_loop();

  SlurmOptions options_;
  std::unique_ptr<SlurmClient> client_;
  std::filesystem::path ledger_path_;

  mutable std::mutex mu_;
  std::map<std::string, Job> jobs_;                         // by worker id
  std::map<std::string, NodeInfo> nodes_;                   // node -> address, state flags
  std::string query_error_;                                 // the last squeue failure, logged once
  bool shut_down_ = false;
  std::condition_variable cv_;
  std::thread poller_;
};

// The batch script for one worker: exports its environment and execs the
// agent (every word single-quoted for sh).
std::string batch_script(const LaunchSpec& spec);

}  // namespace muster::workers::slurm
