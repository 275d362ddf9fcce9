// Launcher: runs a cluster's launcher program (the mpirun line) on the
// daemon's host. A seam, so the cluster manager's unit tests never fork.
//
// Contract
// - start() runs argv (argv[0] looked up on PATH) in its own process group,
//   stdin from /dev/null, stdout+stderr appended to log_path, env added to
//   the daemon's environment, in working_dir. With tagged_output (mpirun
//   --tag-output), the output goes through a pipe and RankLines
//   (mpi_output.h) on a thread of the launcher's own, so the log holds
//   whole lines, each rank's tagged once.
// - LauncherProcess::poll() never blocks: nullopt while the process runs,
//   then its exit code (128+signal when killed by a signal), once its output
//   is in the log (or 2 s after it ended, if something it started still
//   holds the pipe).
// - terminate() ends the whole tree: SIGTERM to the launcher's process
//   group, its session (mpirun gives each rank a group of its own in its
//   session) and every descendant, SIGKILL after grace; idempotent. The
//   destructor terminates a process still running.
// - identity() is the launcher's {pid, start time} (its pgid and session id
//   are its pid), for the cluster record: a daemon killed with -9 leaves the
//   launcher running, and the next daemon ends it with end_orphan().
// - end_orphan() ends such a launcher's tree the same way, and only if the
//   identity still names it (or its session survives it): a reused pid is
//   never signalled. Returns whether anything was left to end.
// - One LauncherProcess is used by one thread at a time.
#pragma once

#include <chrono>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "api/base/process.h"
#include "api/base/rotating_log.h"
#include "api/status.h"

namespace muster::service {

struct LauncherSpec {
  std::vector<std::string> argv;
  std::map<std::string, std::string> env;
  std::filesystem::path working_dir;
  std::filesystem::path log_path;
  bool tagged_output = false;
};

class LauncherProcess {
 public:
  virtual ~LauncherProcess() = default;
  virtual std::optional<int> poll() = 0;
  virtual void terminate(std::chrono::milliseconds grace) = 0;
  virtual base::ProcessId identity() const { return {}; }
};

class Launcher {
 public:
  virtual ~Launcher() = default;
  virtual api::Result<std::unique_ptr<LauncherProcess>> start(const LauncherSpec& spec) = 0;
  virtual bool end_orphan(const base::ProcessId& /*leader*/, std::chrono::milliseconds /*grace*/) { return false; }
};

// How the real launcher caps its log: its output goes through
// `muster-agent --log-relay` (api/log_capture.h) into log_path.
struct LauncherLogRelay {
  std::filesystem::path agent_path;
  base::RotatingLogOptions limits;
};

// The real one: base::spawn children in a session of their own (clean
// signal mask and dispositions, no inherited descriptors). With `relay`,
// the launcher's output reaches log_path through the relay, which ends
// (and is reaped) once the launcher's whole tree has; without it, the
// launcher appends to log_path itself, uncapped.
std::unique_ptr<Launcher> make_process_launcher(std::optional<LauncherLogRelay> relay = std::nullopt);

}  // namespace muster::service
