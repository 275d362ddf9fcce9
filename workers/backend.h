// Backend: where workers are placed.
//
// Contract
// - A backend starts `muster-agent` for each worker it is asked to launch; the
//   agent (workers/agent/) registers the worker's IP with the daemon, runs the
//   user's script and reports its exit code. The backend itself knows only
//   processes (or containers, or SSH sessions), never the REST API.
// - launch() is all-or-nothing: if any worker of the batch cannot be started,
//   those already started are stopped before it returns the error, which names
//   the worker and the reason.
// - stop() ends the worker's whole process tree, also the processes that
//   left its process group or session (setsid, a double fork): it returns
//   once SIGTERM (or the backend's equivalent) has been delivered, and the
//   waiting (the grace period, then SIGKILL, then cleanup) happens on the
//   backend's own threads, so a stop never holds its caller for the grace.
//   It is idempotent. How each backend reaches every process:
//     local      a cgroup v2 per worker where one can be made (cgroup.kill
//                ends everything in it; the cgroup is removed once empty),
//                else the agent's process group and its descendants (the
//                agent is a child subreaper: orphans of the script re-parent
//                to it instead of init);
//     container  the agent's group, then every process in the worker's
//                network namespace (`ip netns pids`);
//     ssh        the agent's group on the host, and the agent's subreaper;
//     slurm      scancel: Slurm's own process tracking ends the job's
//                processes (proctrack/cgroup), and the agent's subreaper.
//   The agent itself ends what the script left running when the script
//   exits, stopped or not (workers/agent/agent.h).
// - The agent's combined stdout/stderr goes to LaunchSpec::log_path on this
//   machine (a remote backend streams it back there), never past
//   LaunchSpec::log_limits (base::RotatingLog).
// - Every method may be called from any thread; implementations lock inside.
// - Implementations live in one subfolder each: local/, container/, ssh/,
//   slurm/. How mpirun reaches the workers' hosts is not part of this
//   interface: backends that need to say so implement MpiHosts
//   (mpi_hosts.h), which the cluster side is handed explicitly.
#pragma once

#include <chrono>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "api/base/rotating_log.h"
#include "api/status.h"
#include "api/worker.h"

namespace muster::workers {

// Everything a backend needs to start one worker's agent.
struct LaunchSpec {
  std::string worker_id;
  double cpu = 1.0;         // cores (may be fractional)
  double memory_gb = 1.0;   // GiB
  int nvidia_gpu = 0;
  // The agent's command line (argv[0] is the agent binary on the daemon's
  // host; a remote backend maps it to the agent's path on the target).
  std::vector<std::string> agent_argv;
  // Environment for the agent (api/agent_protocol.h): MUSTER_URL (built from
  // master_address(), so the backend passes it on unchanged), the worker's
  // id and token, and the caller's env.
  std::map<std::string, std::string> env;
  std::filesystem::path working_dir;  // the worker's own directory, <state-dir>/workers/<id>/
  std::filesystem::path log_path;     // where the agent's output is written
  // The log's cap and rotation. The env carries them to the agent as
  // MUSTER_LOG_* (api/log_capture.h), and an agent that sees this machine's
  // files writes log_path itself through its relay (local, container,
  // slurm); a remote backend removes those variables and writes what it
  // streams back with the same limits (ssh).
  base::RotatingLogOptions log_limits;
};

// What a backend can tell of a worker's process without the agent's help.
enum class ProcessState {
  kPending,   // queued by a scheduler, not started yet (queueing backends only)
  kRunning,   // the process (tree) is alive
  kExited,    // it ended; exit_code says how
  kUnknown,   // the backend has no record (e.g. launched by an earlier daemon)
  kLost,      // the backend lost its connection to the worker (ssh, link down)
};

struct ProcessStatus {
  ProcessStatus() = default;
  ProcessStatus(ProcessState s, std::optional<int> code = std::nullopt) : state(s), exit_code(code) {}

  ProcessState state = ProcessState::kUnknown;
  std::optional<int> exit_code;  // set when kExited (128+signal if killed)
  // What the backend can say about the state ("queued in Slurm (Resources)",
  // "cancelled in Slurm"); "" when nothing. Becomes the worker's reason.
  std::string reason;
  // For kExited/kLost: the terminal status the backend's scheduler decided
  // (a cancelled job is stopped, a failed node lost); empty = the registry's
  // own rule (an agent that exited without reporting failed).
  std::optional<api::WorkerStatus> outcome;
};

class Backend {
 public:
  virtual ~Backend() = default;

  // "local", "container", "ssh".
  virtual std::string name() const = 0;

  // The address at which workers placed by this backend reach the daemon
  // (their MUSTER_MASTER_IP, and MUSTER_URL's host): 127.0.0.1 for local
  // processes, the bridge address for containers, the daemon host's routable
  // address for ssh. The one seam through which a backend says so.
  virtual std::string master_address() const = 0;

  // True for a backend that hands workers to a scheduler's queue (Slurm):
  // launch() only submits them, and poll() answers kPending (with the
  // scheduler's reason) until they start. The registry keeps such workers
  // `scheduling` until then and counts the startup timeout from their start.
  virtual bool queues_workers() const { return false; }

  // Starts all of `specs` or none (see the contract above).
  virtual api::Status launch(const std::vector<LaunchSpec>& specs) = 0;

  // Signals the worker's process tree and returns; SIGKILL follows after
  // `grace` on the backend's threads (see the contract above). Idempotent;
  // unknown ids are not an error. An error means the tree could not be
  // signalled (it may still run) and names why.
  virtual api::Status stop(const std::string& worker_id, std::chrono::milliseconds grace) = 0;

  // The process state as the backend sees it.
  virtual ProcessStatus poll(const std::string& worker_id) = 0;

  // What names the worker's process to a later daemon (the local backend:
  // the agent's "<pid>:<start time>"); the registry persists it with the
  // worker. "" when the backend has nothing to persist.
  virtual std::string process_identity(const std::string& /*worker_id*/) { return ""; }
  // A restarted daemon hands back what process_identity() said for a worker
  // that had not finished, so that poll() and stop() reach it again.
  virtual void adopt(const std::string& /*worker_id*/, const std::string& /*identity*/) {}

  // Whether LaunchSpec::log_path holds everything the worker's agent wrote.
  // A backend that copies the log from elsewhere, and so can lag the agent's
  // exit report (kubernetes follows the pod's log from the kubelet, whose
  // stream ends only once the container has), answers false until its copy
  // has caught up with the worker's end. The registry then holds the
  // reported exit (the worker stays `running`) until this is true or
  // RegistryOptions::log_drain_timeout has passed, so whoever sees a worker
  // ended (an await, a cluster, the failure's reason) reads its whole log.
  // Cheap, no request: the registry asks from tick(), outside its lock.
  virtual bool log_complete(const std::string& /*worker_id*/) { return true; }

  // The registry no longer knows the worker (it finished and was deleted or
  // retired): drop what is kept about it.
  virtual void forget(const std::string& /*worker_id*/) {}

  // Releases everything the backend created (processes, namespaces, links,
  // sessions). Called once when the daemon shuts down.
  virtual void shutdown() = 0;
};

}  // namespace muster::workers
