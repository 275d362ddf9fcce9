// Launcher: runs a cluster's launcher program (the mpirun line) on the
// daemon's host, under muster-launcher (launcher_keeper.h), so the job is
// not bound to the daemon's life. A seam, so the cluster manager's unit
// tests never fork.
//
// Contract
// - start() runs the keeper in a session of its own, with env added to the
//   daemon's environment, in working_dir; the keeper runs argv (argv[0]
//   looked up on PATH: a program that is not there is an error here, and
//   nothing starts), stdin from /dev/null, stdout+stderr into log_path with
//   the log's cap (through RankLines with tagged_output, mpirun
//   --tag-output: whole lines, each rank's tagged once), and writes the exit
//   code to exit_file when it ends.
// - LauncherProcess::poll() never blocks: nullopt while the job runs, then
//   its exit code (128+signal when killed by a signal), once its output is
//   in the log.
// - terminate() ends the whole tree: SIGTERM to the keeper's process group,
//   its session (mpirun gives each rank a group of its own in its session)
//   and every descendant, SIGKILL after grace; idempotent. The destructor
//   terminates a job still running, unless detach() was called (the daemon
//   going away: its job runs on, for the next daemon to adopt).
// - identity() is the keeper's {pid, start time} (its pgid and session id
//   are its pid), for the cluster record.
// - adopt() takes back the job of an earlier daemon by that identity and its
//   exit file: poll() reads the exit file (or, a keeper gone without one,
//   128+SIGKILL); terminate() ends the tree by identity, never a reused pid.
//   nullptr when the keeper is gone and left no exit file.
// - end_orphan() ends such a job's tree the same way, and only if the
//   identity still names it (or its session survives it). Returns whether
//   anything was left to end.
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
  std::filesystem::path exit_file;  // "": launcher.exit beside log_path
  bool tagged_output = false;
};

class LauncherProcess {
 public:
  virtual ~LauncherProcess() = default;
  virtual std::optional<int> poll() = 0;
  virtual void terminate(std::chrono::milliseconds grace) = 0;
  virtual void detach() {}
  virtual base::ProcessId identity() const { return {}; }
};

class Launcher {
 public:
  virtual ~Launcher() = default;
  virtual api::Result<std::unique_ptr<LauncherProcess>> start(const LauncherSpec& spec) = 0;
  virtual std::unique_ptr<LauncherProcess> adopt(const base::ProcessId& /*keeper*/,
                                                 const std::filesystem::path& /*exit_file*/) {
    return nullptr;
  }
  virtual bool end_orphan(const base::ProcessId& /*leader*/, std::chrono::milliseconds /*grace*/) { return false; }
};

// The real launcher's keeper and the cap of the logs it writes.
struct LauncherOptions {
  std::filesystem::path keeper_path;  // muster-launcher; "": beside this program
  base::RotatingLogOptions limits;
};

// The real one: base::spawn of the keeper in a session of its own (clean
// signal mask and dispositions, no inherited descriptors).
std::unique_ptr<Launcher> make_process_launcher(LauncherOptions options);

}  // namespace muster::service
