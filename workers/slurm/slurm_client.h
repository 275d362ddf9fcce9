// SlurmClient: the Slurm backend's one seam onto Slurm.
//
// Contract
// - submit() hands one batch job to Slurm and returns its job id; it never
//   waits for the job to start.
// - cancel() asks Slurm to end a job (scancel); cancelling a job that has
//   already ended is not an error.
// - query() returns what Slurm knows of the given jobs, keyed by job id; a job
//   Slurm no longer remembers is simply absent.
// - Only Slurm's machine-readable interfaces are used (sbatch --parsable,
//   squeue --json, sinfo --json), never its human-formatted tables.
// - Implementations are thread-safe. Unit tests use a fake that records the
//   submitted jobs and hands out job states.
#pragma once

#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "api/status.h"

namespace muster::workers::slurm {

// One worker as a batch job.
struct JobSpec {
  std::string name;                   // --job-name
  std::filesystem::path script;       // the batch script (exec's the agent)
  std::filesystem::path output;       // --output (the worker's log)
  std::filesystem::path working_dir;  // --chdir
  int cpus_per_task = 1;              // --cpus-per-task
  long memory_mb = 1024;              // --mem
  int gpus = 0;                       // --gres=gpu:k (k > 0 only)
  std::string partition, account, qos, time_limit;  // left out when empty
};

// sbatch's argument vector for `spec` (without argv[0]'s path lookup).
std::vector<std::string> sbatch_argv(const JobSpec& spec);

// What squeue says of one job.
struct JobInfo {
  std::string job_id;
  std::string state;   // PENDING, RUNNING, COMPLETED, FAILED, CANCELLED, ...
  std::string reason;  // Slurm's state reason: Resources, Priority, NonZeroExitCode, None, ...
  std::string nodes;   // the node list ("" while pending)
  std::optional<int> exit_code;  // the batch script's exit status, once known
  std::optional<int> signal;     // the signal that ended it, if any
};

// Parses `squeue --json` output. invalid_argument naming what was wrong.
api::Result<std::map<std::string, JobInfo>> parse_squeue_json(const std::string& text);

// What sinfo says of one node.
struct NodeInfo {
  std::string address;             // NodeAddr: where the node's workers are reached
  std::vector<std::string> flags;  // "IDLE", "DOWN", "NOT_RESPONDING", ...
};

// Parses `sinfo --json` output into node name -> NodeInfo.
api::Result<std::map<std::string, NodeInfo>> parse_sinfo_nodes_json(const std::string& text);

class SlurmClient {
 public:
  virtual ~SlurmClient() = default;
  virtual api::Result<std::string> submit(const JobSpec& spec) = 0;
  virtual api::Status cancel(const std::string& job_id) = 0;
  virtual api::Result<std::map<std::string, JobInfo>> query(const std::vector<std::string>& job_ids) = 0;
  // Node name -> address and state, for telling a failed node from a slow
  // one and for finding the node behind a worker's address.
  virtual api::Result<std::map<std::string, NodeInfo>> nodes() = 0;
};

// The real one: runs sbatch, scancel, squeue and sinfo (found on PATH; the
// Slurm configuration from SLURM_CONF or the default place), each with a
// time limit.
std::unique_ptr<SlurmClient> make_command_client();

}  // namespace muster::workers::slurm
