#include "workers/agent/leftovers.h"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <thread>

#include "api/agent_protocol.h"
#include "api/base/process.h"

namespace muster::workers::agent {

namespace {

// Collects every child of the agent that has ended (orphans included).
void reap_children() {
  while (::waitpid(-1, nullptr, WNOHANG) > 0) {
  }
}

}  // namespace

std::string Leftovers::adopt_process(const std::string& cgroup, const std::string& worker_id) {
  std::string note;
  if (::prctl(PR_SET_CHILD_SUBREAPER, 1) != 0) note = "not a child subreaper; ";
  if (cgroup == api::kCgroupNone) return note + "no cgroup (turned off); its process group and descendants are ended";
  if (!cgroup.empty()) {
    base::Cgroup given(cgroup);
    if (::mkdir(cgroup.c_str(), 0755) != 0 && errno != EEXIST) {
      return note + "cannot make the worker's cgroup " + cgroup + " (" + std::strerror(errno) +
             "); its process group and descendants are ended";
    }
    if (const base::Failure failed = given.add(::getpid())) {
      given.remove();
      return note + "cannot join the worker's cgroup (" + *failed + "); its process group and descendants are ended";
    }
    cgroup_ = given;
    return note + "in cgroup " + cgroup;
  }
  const auto own = base::own_cgroup();
  auto parent = base::CgroupParent::find("muster");
  if (!own || !parent.parent) {
    return note + "no cgroup (" + (parent.why_not.empty() ? std::string("no cgroup v2") : parent.why_not) +
           "); its process group and descendants are ended";
  }
  auto made = parent.parent->create("agent-" + worker_id);
  if (made.failure) return note + "no cgroup (" + *made.failure + ")";
  if (const base::Failure failed = made.cgroup.add(::getpid())) {
    made.cgroup.remove();
    return note + "no cgroup (" + *failed + ")";
  }
  cgroup_ = made.cgroup;
  own_cgroup_ = true;
  original_ = own->string();
  return note + "in cgroup " + cgroup_.path().string();
}

std::vector<pid_t> Leftovers::list() const {
  std::vector<pid_t> out;
  const pid_t self = ::getpid();
  if (cgroup_.valid()) {
    for (pid_t pid : cgroup_.processes()) {
      auto stat = base::read_proc_stat(pid);
      if (pid != self && pid != spared_ && stat && stat->live()) out.push_back(pid);
    }
    return out;
  }
  auto me = base::identify(self);
  if (!me) return out;
  for (const auto& p : base::descendants(*me)) {
    if (p.pid != spared_) out.push_back(p.pid);
  }
  return out;
}

size_t Leftovers::end(std::chrono::milliseconds grace) {
  reap_children();
  auto left = list();
  const size_t found = left.size();
  if (left.empty()) return 0;
  for (pid_t pid : left) ::kill(pid, SIGTERM);
  const auto deadline = std::chrono::steady_clock::now() + grace;
  while (!left.empty() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    reap_children();
    left = list();
  }
  // Twice: a process may fork between the listing and its signal.
  for (int round = 0; round < 2 && !left.empty(); ++round) {
    for (pid_t pid : left) ::kill(pid, SIGKILL);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    reap_children();
    left = list();
  }
  return found;
}

void Leftovers::release() {
  if (!own_cgroup_) return;
  base::Cgroup(original_).add(::getpid());
  cgroup_.remove();
  own_cgroup_ = false;
}

}  // namespace muster::workers::agent
