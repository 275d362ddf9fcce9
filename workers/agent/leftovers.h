// Leftovers: what a worker's script leaves running, and ending it.
//
// The agent becomes a child subreaper (PR_SET_CHILD_SUBREAPER) before it
// starts the script, so a process the script double-forks re-parents to the
// agent instead of init, and one that calls setsid stays its descendant. The
// agent also sits in the worker's cgroup when there is one: the backend's
// (MUSTER_CGROUP), else one it makes for itself under its own cgroup
// (removed again at exit). So when the script ends, stopped or not, every
// process it started is either in that cgroup or below the agent, and
// end() stops them: SIGTERM, up to `grace` for them to go (reaping the
// orphans that became the agent's children), then SIGKILL.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <string>
#include <vector>

#include "api/base/cgroup.h"

namespace muster::workers::agent {

class Leftovers {
 public:
  // Makes the calling process a child subreaper and puts it in a cgroup:
  // `cgroup` when given (the backend's), else one of its own named after
  // `worker_id` where cgroup v2 allows. Returns a line for the worker's log.
  std::string adopt_process(const std::string& cgroup, const std::string& worker_id);

  // A process of the agent's own that is not the script's (the log relay):
  // list() and end() leave it alone.
  void spare(pid_t pid) { spared_ = pid; }

  // The processes of the worker other than the agent itself (and the spared one).
  std::vector<pid_t> list() const;
  // Ends them (see above); returns how many there were.
  size_t end(std::chrono::milliseconds grace);
  // Leaves the cgroup the agent made for itself and removes it.
  void release();

  const base::Cgroup& cgroup() const { return cgroup_; }

 private:
  base::Cgroup cgroup_;
  bool own_cgroup_ = false;
  pid_t spared_ = -1;
  std::string original_;  // the agent's cgroup before it joined its own
};

}  // namespace muster::workers::agent
