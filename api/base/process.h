// Child processes: spawn, identify, signal, reap. Every place that starts or
// ends a process (the local backend, the agent, the container executor, the
// cluster launcher) goes through here, so each rule below holds everywhere.
//
// Contract
// - spawn() starts argv (argv[0] a path, or a name looked up on PATH) with
//   the caller's environment plus `env` (minus `unset_env`), in `cwd`, stdin
//   from /dev/null (or `input_fd`), stdout+stderr appended to `output` (or onto `output_fd`,
//   or inherited). The child starts clean: signal mask empty, every signal's
//   disposition the default, and no file descriptor but 0, 1 and 2 (a
//   daemon's listening socket never leaks into a child that outlives it).
//   With `new_session` the child leads its own session and process group
//   (pgid == pid), so one signal reaches its whole tree.
//   Without `child_setup` this is posix_spawn (POSIX_SPAWN_SETSIGMASK |
//   SETSIGDEF, closefrom); with it, fork + exec where the child runs
//   `child_setup` (async-signal-safe calls only: setns, unshare, ...) first.
// - ProcessId is {pid, start time}: the start time (field 22 of
//   /proc/<pid>/stat, clock ticks since boot) tells a process apart from a
//   later one that reuses its pid. It survives a daemon restart (persist it
//   with to_string(), read it back with parse()).
// - signal_process() and signal_group() signal only the process (group) the
//   ProcessId names: never a reused pid, never a reused process group. A
//   group is signalled when its leader is still the same process, or when no
//   process holds the leader's pid any more (the kernel does not hand out a
//   pid that is still some group's id, so the members left are the group's).
// - try_reap() is waitpid(WNOHANG) on a child of this process.
// - Exit codes are the shell's: the exit status, or 128+signal.
// Every function may be called from any thread.
#pragma once

#include <sys/types.h>

#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "api/base/error.h"

namespace muster::base {

struct ProcessId {
  pid_t pid = 0;
  unsigned long long start_time = 0;  // /proc/<pid>/stat field 22

  bool valid() const { return pid > 0 && start_time > 0; }
  bool operator==(const ProcessId& o) const { return pid == o.pid && start_time == o.start_time; }
  bool operator!=(const ProcessId& o) const { return !(*this == o); }
  bool operator<(const ProcessId& o) const {
    return pid < o.pid || (pid == o.pid && start_time < o.start_time);
  }
  // "<pid>:<start_time>", and back (nullopt when malformed).
  std::string to_string() const;
  static std::optional<ProcessId> parse(const std::string& text);
};

// One line of /proc/<pid>/stat.
struct ProcStat {
  pid_t pid = 0;
  char state = '?';  // 'R', 'S', 'Z' (zombie), ...
  pid_t ppid = 0;
  pid_t pgrp = 0;
  pid_t session = 0;
  unsigned long long start_time = 0;
  ProcessId id() const { return {pid, start_time}; }
  bool live() const { return state != 'Z' && state != 'X'; }
};

std::optional<ProcStat> read_proc_stat(pid_t pid);
// Every process of the machine (of this pid namespace).
std::vector<ProcStat> list_processes();

// The identity of `pid` now (nullopt when there is no such process).
std::optional<ProcessId> identify(pid_t pid);
// The same process is still there and is not a zombie.
bool alive(const ProcessId& id);
// A non-zombie process is a member of group `pgid`.
bool group_alive(pid_t pgid);
// Live processes below `root` (by parent links; children that left its
// group or session included). Empty when `root` is not alive.
std::vector<ProcessId> descendants(const ProcessId& root);

// false (nothing sent) when `id` no longer names a live process.
bool signal_process(const ProcessId& id, int sig);
// Signals group `leader.pid` (see the contract); false when nothing was sent.
bool signal_group(const ProcessId& leader, int sig);
// The live members of the session `leader` leads (a process that moved to
// a group of its own, as mpirun's ranks do, stays in its session), by the
// same rule as signal_group(): empty when another process holds its pid.
std::vector<ProcessId> session_members(const ProcessId& leader);
// signal_process() to every session member; how many were signalled.
int signal_session(const ProcessId& leader, int sig);

// waitpid(WNOHANG): the exit code once `pid` (a child) ended, nullopt while
// it runs, -1 when it is not (or no longer) our child.
std::optional<int> try_reap(pid_t pid);
// Blocking waitpid (EINTR retried); -1 when it is not our child.
int wait_exit(pid_t pid);
// The shell's exit code of a waitpid status.
int exit_code_of(int wait_status);

struct SpawnOptions {
  std::vector<std::string> argv;
  std::map<std::string, std::string> env;  // set over the inherited environment
  bool inherit_env = true;                 // false: only `env`
  std::vector<std::string> unset_env;      // removed from the inherited environment
  std::filesystem::path cwd;               // empty: the caller's
  std::filesystem::path output;            // stdout+stderr appended here (created 0644)
  int output_fd = -1;                      // or onto this descriptor
  int error_fd = -1;                       // >= 0: stderr onto this descriptor instead
  bool stdin_null = true;                  // false: inherit stdin
  int input_fd = -1;                       // >= 0: stdin from this descriptor instead
  bool new_session = true;                 // setsid: own session and group
  bool new_process_group = false;          // setpgid(0, 0) without a new session
  // Runs in the forked child before exec; returns 0 or an exit code for the
  // child (it then never execs). Async-signal-safe calls only.
  std::function<int()> child_setup;
};

struct Spawned {
  ProcessId id;
  Failure failure;  // set: nothing was started
};

[[nodiscard]] Spawned spawn(const SpawnOptions& options);

// `program` as spawn() would run it: itself when it has a '/', else the first
// executable of that name on PATH; nullopt when there is none.
std::optional<std::string> find_on_path(const std::string& program);

}  // namespace muster::base
