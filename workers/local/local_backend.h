// LocalBackend: every worker is a process tree on this machine.
//
// - launch(): base::spawn of the agent in a new session (so its own process
//   group, pgid == pid), cwd = LaunchSpec::working_dir, stdin /dev/null,
//   stdout+stderr appended to LaunchSpec::log_path, environment = the
//   daemon's environment plus LaunchSpec::env. All-or-nothing.
// - stop(): SIGTERM to the group, SIGKILL after the grace period; returns
//   once the group is gone (or, at worst, 2 s after SIGKILL).
// - poll(): reaps with waitpid(WNOHANG); 128+signal when killed. A reaper
//   thread also reaps every 200 ms, so finished agents never stay zombies.
// - Every agent is known by its base::ProcessId {pid, start time}; stop()
//   signals its group only while that identity holds (or the group outlives
//   its leader), never a process group that reused the number.
// - Agents outlive the daemon by default so that a restarted daemon adopts
//   them (they keep heartbeating); --backend-opt stop_on_shutdown=1 ends them
//   at shutdown instead. process_identity() is what the registry persists;
//   adopt() hands it back after a restart, so poll() and stop() reach the
//   earlier daemon's agents too (poll(): running while the identity holds,
//   else exited with code -1, as the exit code is not ours to read).
#pragma once

#include <condition_variable>
#include <map>
#include <mutex>
#include <thread>
#include <optional>
#include <string>

#include "api/base/process.h"
#include "workers/backend.h"

namespace muster::workers::local {

struct LocalBackendOptions {
  bool stop_on_shutdown = false;
};

class LocalBackend final : public Backend {
 public:
  explicit LocalBackend(LocalBackendOptions options = {});
  ~LocalBackend() override;

  std::string name() const override { return "local"; }
  std::string master_address() const override { return "127.0.0.1"; }
  api::Status launch(const std::vector<LaunchSpec>& specs) override;
  api::Status stop(const std::string& worker_id, std::chrono::milliseconds grace) override;
  ProcessStatus poll(const std::string& worker_id) override;
  std::string process_identity(const std::string& worker_id) override;
  void adopt(const std::string& worker_id, const std::string& identity) override;
  void shutdown() override;

 private:
  struct Child {
    base::ProcessId id;            // the agent; its pid is also the group id
    bool ours = true;              // our child (reaped here), or adopted
    std::optional<int> exit_code;  // set once it ended
  };
  // waitpid(WNOHANG) on the leader; call with mu_ held.
  void reap_locked(Child& child);
  bool group_alive(const std::string& worker_id);

  void reaper_loop();

  LocalBackendOptions options_;
  std::mutex mu_;
  std::map<std::string, Child> children_;
  std::condition_variable reaper_cv_;
  bool closing_ = false;
  std::thread reaper_;
};

}  // namespace muster::workers::local
