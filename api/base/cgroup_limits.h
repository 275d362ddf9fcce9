// CgroupLimits: a worker's cpu and memory limits, enforced with the kernel's
// cgroups as runc and Slurm's task/cgroup do, on either layout:
//
//   cgroup v2, where the controller reaches the worker's cgroup (the one its
//     agent sits in, workers/agent/leftovers.h): memory.max and
//     memory.swap.max 0, cpu.max "<quota> <period>". A controller its parent
//     is not given is enabled first (+memory / +cpu into the parent's
//     cgroup.subtree_control, and the grandparent's when that is the
//     hierarchy's root), which works as root or in a delegated subtree.
//   cgroup v1 otherwise (a hybrid host: the v2 hierarchy without the
//     controller, the v1 one mounted): one directory per worker and
//     hierarchy, <this process's cgroup there>/muster-<name>, with
//     memory.limit_in_bytes and, where the kernel accounts swap,
//     memory.memsw.limit_in_bytes at the same value (no swap beyond the
//     limit, Slurm's AllowedSwapSpace=0); cpu.cfs_period_us 100000 and
//     cpu.cfs_quota_us cores x period (at least 1000).
//   neither: the limit is recorded only, and the report says why.
//
// Contract
// - CgroupMounts says where the hierarchies are: parse() reads the text of
//   /proc/self/mountinfo and /proc/self/cgroup; of_this_process() those
//   files; under(root) a directory standing in for /sys/fs/cgroup (tests:
//   <root>/unified or <root> itself for v2, <root>/memory and <root>/cpu for
//   v1, this process at the top of each).
// - probe() says, touching nothing, how each limit would be enforced for a
//   worker whose v2 cgroup is made under `v2_parent` (the daemon's launch
//   warnings for the backends whose workers run on its host).
// - apply() makes the v1 directories and writes the limits; it never fails
//   the launch: report() says per resource ("cpu", "memory") either
//   "enforced by cgroup v1|v2" or "not enforced: <why>".
// - join_child() runs in a forked child before exec (SpawnOptions::
//   child_setup): it moves the child into the v1 directories through
//   descriptors opened by apply(), with async-signal-safe calls only. The
//   v2 cgroup is joined by its owner (the agent, before anything forks).
// - out_of_memory() is true once the kernel's OOM killer ended a process of
//   the worker since apply(): v2 memory.events oom_kill, v1
//   memory.oom_control oom_kill. Never guessed from a SIGKILL.
// - remove() deletes the v1 directories (false while a process is still in
//   one); the destructor does the same, best effort. The v2 cgroup belongs to
//   whoever made it. What a killed owner left, sweep_abandoned_limits() takes
//   away (the agent at its start, the local backend when a worker ends).
// Move-only (it holds the descriptors). Not thread-safe; never throws.
#pragma once

#include <sys/types.h>

#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "api/base/cgroup.h"

namespace muster::base {

// How each limit is enforced: "cpu" / "memory" -> "enforced by cgroup v1",
// "enforced by cgroup v2", "enforced by <a runtime>" or "not enforced: <why>".
using LimitReport = std::map<std::string, std::string>;
inline constexpr const char* kLimitCpu = "cpu";
inline constexpr const char* kLimitMemory = "memory";
inline constexpr const char* kNotEnforced = "not enforced: ";
bool limit_enforced(const std::string& report_value);

struct CgroupMounts {
  std::optional<std::filesystem::path> v2_root;  // the cgroup2 mount point
  std::optional<std::filesystem::path> v2_own;   // this process's cgroup in it
  // cgroup v1: controller ("memory", "cpu") -> this process's cgroup in its hierarchy.
  std::map<std::string, std::filesystem::path> v1_own;

  static CgroupMounts parse(const std::string& mountinfo, const std::string& proc_cgroup);
  static CgroupMounts of_this_process();
  static CgroupMounts under(const std::filesystem::path& root);
  // under(root) when `root` is given (MUSTER_CGROUP_ROOT), else of_this_process().
  static CgroupMounts for_limits(const std::string& root);
};

struct LimitsRequest {
  std::string name;   // the v1 directories are muster-<name> (the agent's: <worker id>-<its pid>)
  double cpu = 0;     // cores; 0: no cpu limit
  double memory_gb = 0;  // GiB; 0: no memory limit
};

// Removes the v1 directories muster-<anything>-<pid> (the agent names them
// <worker id>-<its pid>) whose pid has ended and that hold no process: what
// an agent killed before its remove() left. A live owner's directory, empty
// or not, is never touched. Returns how many went.
size_t sweep_abandoned_limits(const CgroupMounts& mounts);

// How apply() would enforce `request` for a worker whose v2 cgroup is made in
// `v2_parent` (nullopt: it gets none), without writing anything.
LimitReport probe_limits(const CgroupMounts& mounts, const std::optional<std::filesystem::path>& v2_parent,
                         const LimitsRequest& request);

class CgroupLimits {
 public:
  CgroupLimits() = default;
  // `v2` is the worker's v2 cgroup (invalid: none); it is used only when it
  // lies in mounts.v2_root.
  static CgroupLimits apply(const CgroupMounts& mounts, const Cgroup& v2, const LimitsRequest& request);
  ~CgroupLimits();
  CgroupLimits(CgroupLimits&& other) noexcept;
  CgroupLimits& operator=(CgroupLimits&& other) noexcept;
  CgroupLimits(const CgroupLimits&) = delete;
  CgroupLimits& operator=(const CgroupLimits&) = delete;

  const LimitReport& report() const { return report_; }
  // The v1 directories made (for tests and log lines).
  const std::vector<std::filesystem::path>& v1_dirs() const { return v1_dirs_; }

  // In the forked child, before exec: 0, or 126 when it could not join.
  int join_child() const;
  // The same for a running process (tests; a child the caller cannot set up).
  Failure join(pid_t pid) const;
  bool out_of_memory() const;
  bool remove();

 private:
  void close_fds();
  uint64_t oom_kills() const;

  LimitReport report_;
  std::vector<std::filesystem::path> v1_dirs_;
  std::vector<int> procs_fds_;  // cgroup.procs of each v1 directory, open for writing
  std::optional<std::filesystem::path> oom_file_;  // memory.events (v2) or memory.oom_control (v1)
  uint64_t oom_baseline_ = 0;
};

}  // namespace muster::base
