// muster-launcher: the keeper between musterd and a cluster's launcher
// program (the mpirun line), so that the job is not bound to the daemon's
// life: a daemon killed or restarted leaves the keeper, mpirun and the ranks
// running, and the next daemon takes the cluster back (ClusterManager::
// restore, Launcher::adopt).
//
//   muster-launcher --log PATH --max-bytes N --keep K --exit-file PATH [--tagged] -- PROGRAM ARGS...
//
// Step by step (run_keeper):
// a) the log is opened with its cap and rotation (api/base/rotating_log.h);
// b) PROGRAM runs in the keeper's session (the daemon started the keeper in
//    a session of its own, so ending that session ends the job), with stdout
//    and stderr on a pipe to the keeper, stdin from /dev/null;
// c) the keeper copies the pipe into the log, through RankLines with
//    --tagged (mpi_output.h: mpirun's tagged lines whole);
// d) once PROGRAM has ended and every writer closed the pipe (or 2 s after
//    it ended: an escaped rank may hold it), the keeper writes PROGRAM's exit
//    code (128+signal when killed) to the exit file, atomically, and exits
//    with that code.
// The keeper ignores SIGHUP, SIGINT, SIGTERM and SIGPIPE: a stop signals
// the whole session, mpirun ends its job, and the keeper stays to record how
// it ended. SIGKILL of the session ends it too (no exit file: the daemon
// reads that as a launcher killed).
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "api/base/rotating_log.h"
#include "api/status.h"

namespace muster::service {

struct KeeperOptions {
  std::filesystem::path log;
  base::RotatingLogOptions limits;
  std::filesystem::path exit_file;
  bool tagged = false;
  std::vector<std::string> argv;  // PROGRAM ARGS...
};

std::vector<std::string> to_keeper_argv(const std::string& keeper_path, const KeeperOptions& options);
// argv[0] is the keeper itself. Errors name the flag at fault.
api::Result<KeeperOptions> parse_keeper_argv(const std::vector<std::string>& argv);

// a) to d); returns the exit code (PROGRAM's, or 127 when it could not start).
int run_keeper(const KeeperOptions& options);

// The exit code a keeper wrote to `exit_file`, nullopt while it has not.
std::optional<int> read_keeper_exit(const std::filesystem::path& exit_file);

}  // namespace muster::service
