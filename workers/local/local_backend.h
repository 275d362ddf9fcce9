// LocalBackend: every worker is a process tree on this machine.
//
// - launch(): base::spawn of the agent in a new session (so its own process
//   group, pgid == pid), cwd = LaunchSpec::working_dir, stdin /dev/null,
//   stdout+stderr appended to LaunchSpec::log_path, environment = the
//   daemon's environment plus LaunchSpec::env. All-or-nothing. Where a
//   cgroup v2 directory can be made (base::CgroupParent, under the daemon's
//   own cgroup in `muster/`), each worker gets one, <parent>/<worker id>,
//   named to the agent (MUSTER_CGROUP), which makes it and joins it first
//   thing, before anything forks: every process the worker ever starts is
//   inside. (The agent does it, in parallel, rather than this thread in
//   turn: a mkdir and a migration cost about a millisecond each.)
// - stop(): SIGTERM to the agent's group and to every process of the tree
//   (the cgroup's members, else the agent's descendants: the agent is a
//   child subreaper, so double-forked orphans stay below it), then returns.
//   The reaper thread sends SIGKILL to the same set once `grace` has passed
//   (cgroup.kill where there is a cgroup), so no caller waits for the grace.
// - When an agent has exited, whatever is left of its tree (a script's
//   background children, setsid or double-forked escapees) is killed, and
//   the worker's cgroup is removed once it is empty.
// - poll(): what the reaper thread has seen; 128+signal when killed. The
//   reaper thread holds a pidfd per agent in an epoll set and reaps an agent
//   when its pidfd says it ended, so neither it nor the registry's tick
//   (poll() of every worker every 100 ms) makes a system call per running
//   worker: with 1,024 idle workers, two waitpid() per worker per 100 ms cost
//   the daemon 17% of a core. (Where pidfd_open is refused, that worker is
//   polled with waitpid(WNOHANG) as before.) stop() and tree_alive() ask the
//   kernel directly.
// - Every agent is known by its base::ProcessId {pid, start time}; stop()
//   signals its group only while that identity holds (or the group outlives
//   its leader), never a process group that reused the number.
// - Agents outlive the daemon by default so that a restarted daemon adopts
//   them (they keep heartbeating); --backend-opt stop_on_shutdown=true ends
//   them at shutdown instead. process_identity() ("<pid>:<start time>", then
//   "@<cgroup>" when there is one) is what the registry persists; adopt()
//   hands it back after a restart, so poll() and stop() reach the earlier
//   daemon's agents and their cgroups too (poll(): running while the
//   identity holds, else exited with code -1, as the exit code is not ours
//   to read).
#pragma once

#include <chrono>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "api/base/cgroup.h"
#include "api/base/process.h"
#include "workers/backend.h"

namespace muster::workers::local {

struct LocalBackendOptions {
  bool stop_on_shutdown = false;
  // A cgroup per worker where one can be made (false: process groups and
  // the agent's subreaper only; tests of that fallback).
  bool cgroups = true;
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
  void forget(const std::string& worker_id) override;
  void shutdown() override;

  // Where worker cgroups are made ("" when none can be, with why_not()).
  std::string cgroup_parent() const;
  const std::string& why_no_cgroups() const { return why_no_cgroups_; }
  // Whether anything of the worker's tree is still alive (tests).
  bool tree_alive(const std::string& worker_id);

 private:
  using Clock = std::chrono::steady_clock;
  struct Child {
    base::ProcessId id;            // the agent; its pid is also the group id
    bool ours = true;              // our child (reaped here), or adopted
    std::optional<int> exit_code;  // set once the agent ended
    base::Cgroup cgroup;           // valid when the worker has one
    std::optional<Clock::time_point> kill_at;  // stop(): SIGKILL the tree then
    bool cleaned = false;          // the agent ended and nothing of its tree is left
    bool forgotten = false;        // the registry is done with it: drop once cleaned
    int pidfd = -1;                // the agent's pidfd in epoll_, until its end is seen; -1: polled
    bool ended = false;            // the pidfd said the agent ended
  };
  // The agent's exit code once it has ended; call with mu_ held. `ask`: ask
  // the kernel (waitpid(WNOHANG), or whether an adopted agent's identity
  // holds) even when its pidfd has not said so yet.
  void reap_locked(Child& child, bool ask);
  // The agent's pidfd into epoll_ (else it is polled), and out again.
  void watch_locked(const std::string& worker_id, Child& child);
  void unwatch_locked(Child& child);
  // Wakes the reaper thread (a new SIGKILL deadline, or closing).
  void wake_reaper();
  // Sends `sig` to every process of the tree; call with mu_ held.
  void signal_tree_locked(const Child& child, int sig);
  bool tree_alive_locked(const Child& child);
  void reaper_loop();
  void reaper_pass();

  LocalBackendOptions options_;
  std::optional<base::CgroupParent> cgroups_;
  std::string why_no_cgroups_;
  std::mutex mu_;
  std::map<std::string, Child> children_;
  std::map<int, std::string> by_pidfd_;  // pidfd -> worker id
  int epoll_ = -1;                       // the agents' pidfds and wake_
  int wake_ = -1;                        // eventfd
  bool closing_ = false;
  std::thread reaper_;
};

}  // namespace muster::workers::local
