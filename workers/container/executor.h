// Executor: the container backend's one seam onto the operating system.
//
// Contract
// - run() executes a program (argv[0] is a path or a name looked up on PATH;
//   never a shell string) and returns its exit status and combined output.
// - spawn() starts a long-lived child in its own process group, optionally
//   inside a network namespace (/run/netns/<netns>), inside a new UTS
//   namespace with a given hostname, or inside the UTS namespace of another
//   process; its stdout/stderr go to log_path. The caller owns the child and
//   must reap it with try_wait().
// - Everything else the backend does to the system (signals, waiting, sleeping,
//   reading /sys) goes through here too, so unit tests use a fake that records
//   the commands and hands out fake pids; they never fork or sleep.
// - Implementations are thread-safe.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "api/status.h"

namespace muster::workers::container {

struct CommandResult {
  int exit_code = -1;   // 128+signal when killed; -1 when it could not start
  std::string output;   // stdout and stderr together
};

struct SpawnSpec {
  std::vector<std::string> argv;
  std::map<std::string, std::string> env;   // the child's whole environment
  std::filesystem::path cwd;                // empty: inherit
  std::filesystem::path log_path;           // empty: /dev/null
  std::string netns;                        // empty: the daemon's namespace
  std::string new_hostname;                 // non-empty: new UTS namespace with it
  pid_t join_uts_of = 0;                    // non-zero: enter this process's UTS namespace
};

class Executor {
 public:
  virtual ~Executor() = default;
  virtual CommandResult run(const std::vector<std::string>& argv) = 0;
  virtual api::Result<pid_t> spawn(const SpawnSpec& spec) = 0;
  // The exit status (128+signal if killed) once the child ended; nullopt while it runs.
  virtual std::optional<int> try_wait(pid_t pid) = 0;
  virtual void kill_group(pid_t pgid, int signal) = 0;
  virtual void kill_process(pid_t pid, int signal) = 0;
  virtual bool process_alive(pid_t pid) = 0;
  virtual std::string read_file(const std::filesystem::path& path) = 0;
  virtual void sleep_for(std::chrono::milliseconds duration) = 0;
  virtual bool is_root() = 0;
};

// The real one, over base::spawn (joining namespaces: the floor's fork +
// exec path, setns/unshare/sethostname before exec).
std::unique_ptr<Executor> make_system_executor();

}  // namespace muster::workers::container
