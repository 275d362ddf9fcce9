// Launcher: runs a cluster's launcher program (the mpirun line) on the
// daemon's host. A seam, so the cluster manager's unit tests never fork.
//
// Contract
// - start() runs argv (argv[0] looked up on PATH) in its own process group,
//   stdin from /dev/null, stdout+stderr appended to log_path, env added to
//   the daemon's environment, in working_dir.
// - LauncherProcess::poll() never blocks: nullopt while the process runs,
//   then its exit code (128+signal when killed by a signal).
// - terminate() ends the whole process group: SIGTERM, SIGKILL after grace;
//   idempotent. The destructor terminates a process still running.
// - One LauncherProcess is used by one thread at a time.
#pragma once

#include <chrono>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "muster/api/status.h"

namespace muster::service {

struct LauncherSpec {
  std::vector<std::string> argv;
  std::map<std::string, std::string> env;
  std::filesystem::path working_dir;
  std::filesystem::path log_path;
};

class LauncherProcess {
 public:
  virtual ~LauncherProcess() = default;
  virtual std::optional<int> poll() = 0;
  virtual void terminate(std::chrono::milliseconds grace) = 0;
};

class Launcher {
 public:
  virtual ~Launcher() = default;
  virtual api::Result<std::unique_ptr<LauncherProcess>> start(const LauncherSpec& spec) = 0;
};

// The real one: Boost.Process children in their own process group.
std::unique_ptr<Launcher> make_process_launcher();

}  // namespace muster::service
