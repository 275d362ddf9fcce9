// Cgroup: a cgroup v2 directory that holds every process of one worker, so
// that stopping the worker ends all of them, also those that left its
// process group and session (setsid, a double fork): no process can leave
// its cgroup on its own, and cgroup.kill ends the whole group at once.
//
// Contract
// - CgroupParent::find() locates the cgroup v2 hierarchy (the cgroup2 entry
//   of /proc/self/mountinfo, /sys/fs/cgroup on a pure v2 host, often
//   /sys/fs/cgroup/unified on a hybrid one) and this process's own cgroup
//   (the "0::" line of /proc/self/cgroup), and checks that a child cgroup
//   can be made there and has cgroup.kill (Linux 5.14). Otherwise it says
//   why not; callers then fall back on process groups and the agent's child
//   subreaper (see workers/backend.h).
// - create() makes one child directory (an existing empty one is reused);
//   add() moves a process in (its later children are born inside).
// - kill() ends every process inside (cgroup.kill); signal() sends one signal
//   to each process listed in cgroup.procs (SIGTERM before the grace).
// - remove() deletes the directory once nothing is inside (false while a
//   process is, or when it is already gone).
// A Cgroup is a path: copies name the same directory, and nothing happens on
// destruction. Every function may be called from any thread; none throws.
#pragma once

#include <sys/types.h>

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "api/base/error.h"

namespace muster::base {

class Cgroup {
 public:
  Cgroup() = default;
  explicit Cgroup(std::filesystem::path path) : path_(std::move(path)) {}

  const std::filesystem::path& path() const { return path_; }
  bool valid() const { return !path_.empty(); }
  bool exists() const;

  Failure add(pid_t pid) const;
  // The pids inside (empty when none, or the cgroup is gone).
  std::vector<pid_t> processes() const;
  bool populated() const { return !processes().empty(); }
  // How many processes were signalled.
  int signal(int sig) const;
  Failure kill() const;
  bool remove() const;

 private:
  std::filesystem::path path_;
};

class CgroupParent {
 public:
  explicit CgroupParent(std::filesystem::path path) : path_(std::move(path)) {}
  struct Found;
  // Where worker cgroups can be made: <v2 mount><own cgroup>/<subdir>, or
  // why none can.
  static Found find(const std::string& subdir);

  const std::filesystem::path& path() const { return path_; }
  // <parent>/<name>, created (0755).
  struct Created {
    Cgroup cgroup;
    Failure failure;
  };
  Created create(const std::string& name) const;

 private:
  std::filesystem::path path_;
};

struct CgroupParent::Found {
  std::optional<CgroupParent> parent;
  std::string why_not;
};

// The cgroup v2 directory this process is in (nullopt without cgroup v2).
std::optional<std::filesystem::path> own_cgroup();

}  // namespace muster::base
