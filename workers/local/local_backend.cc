#include "workers/local/local_backend.h"

#include <signal.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <stdexcept>

#include "api/agent_protocol.h"
#include "api/base/cgroup_limits.h"

namespace muster::workers::local {

namespace {

// Whether the group that `leader` started still has a live member: the
// leader itself, or (once it is gone) any process of its group, unless
// another process holds the leader's pid (then that group is long gone).
bool group_tree_alive(const base::ProcessId& leader) {
  if (base::alive(leader)) return true;
  auto now = base::read_proc_stat(leader.pid);
  if (now && now->start_time != leader.start_time) return false;
  return base::group_alive(leader.pid);
}

// How often the reaper passes over the workers without being woken: for
// trees whose agent ended but whose leftovers or cgroup remain, and for
// workers without a pidfd.
constexpr auto kReaperPeriod = std::chrono::milliseconds(100);

int pidfd_open(pid_t pid) { return static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)); }

}  // namespace

LocalBackend::LocalBackend(LocalBackendOptions options) : options_(options) {
  if (options_.cgroups) {
    auto found = base::CgroupParent::find("muster");
    cgroups_ = found.parent;
    why_no_cgroups_ = found.why_not;
  } else {
    why_no_cgroups_ = "turned off";
  }
  epoll_ = ::epoll_create1(EPOLL_CLOEXEC);
  wake_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (epoll_ < 0 || wake_ < 0) {
    throw std::runtime_error(std::string("local backend: epoll/eventfd: ") + std::strerror(errno));
  }
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = wake_;
  ::epoll_ctl(epoll_, EPOLL_CTL_ADD, wake_, &ev);
  reaper_ = std::thread([this] { reaper_loop(); });
}

LocalBackend::~LocalBackend() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    closing_ = true;
  }
  wake_reaper();
  reaper_.join();
  for (auto& [id, child] : children_) unwatch_locked(child);
  ::close(epoll_);
  ::close(wake_);
}

void LocalBackend::wake_reaper() {
  const uint64_t one = 1;
  (void)!::write(wake_, &one, sizeof one);
}

void LocalBackend::watch_locked(const std::string& worker_id, Child& child) {
  const int fd = pidfd_open(child.id.pid);
  if (fd < 0) return;  // polled instead
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = fd;
  if (::epoll_ctl(epoll_, EPOLL_CTL_ADD, fd, &ev) != 0) {
    ::close(fd);
    return;
  }
  child.pidfd = fd;
  by_pidfd_[fd] = worker_id;
}

void LocalBackend::unwatch_locked(Child& child) {
  if (child.pidfd < 0) return;
  ::epoll_ctl(epoll_, EPOLL_CTL_DEL, child.pidfd, nullptr);
  by_pidfd_.erase(child.pidfd);
  ::close(child.pidfd);
  child.pidfd = -1;
}

std::string LocalBackend::cgroup_parent() const { return cgroups_ ? cgroups_->path().string() : std::string(); }

void LocalBackend::reaper_loop() {
  epoll_event events[64];
  for (;;) {
    int timeout_ms;
    {
      // Wake for the next SIGKILL deadline, else every kReaperPeriod.
      std::lock_guard<std::mutex> lock(mu_);
      if (closing_) return;
      const auto now = Clock::now();
      auto wake = now + kReaperPeriod;
      for (const auto& [id, child] : children_) {
        if (!child.cleaned && child.kill_at && *child.kill_at < wake) wake = *child.kill_at;
      }
      timeout_ms = static_cast<int>(
          std::max<int64_t>(0, std::chrono::ceil<std::chrono::milliseconds>(wake - now).count()));
    }
    const int n = ::epoll_wait(epoll_, events, 64, timeout_ms);
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (int i = 0; i < n; ++i) {
        if (events[i].data.fd == wake_) {
          uint64_t count;
          (void)!::read(wake_, &count, sizeof count);
          continue;
        }
        auto id = by_pidfd_.find(events[i].data.fd);
        if (id == by_pidfd_.end()) continue;
        auto it = children_.find(id->second);
        if (it != children_.end() && it->second.pidfd == events[i].data.fd) it->second.ended = true;
      }
    }
    reaper_pass();
  }
}

// One pass: reap the agents; SIGKILL the trees whose grace is over; kill
// what is left of a tree whose agent has exited; remove empty cgroups; drop
// workers the registry forgot once nothing of theirs is left.
void LocalBackend::reaper_pass() {
  std::lock_guard<std::mutex> lock(mu_);
  const auto now = Clock::now();
  for (auto it = children_.begin(); it != children_.end();) {
    Child& child = it->second;
    if (!child.cleaned) {
      reap_locked(child, /*ask=*/false);
      if (child.kill_at && *child.kill_at <= now) {
        child.kill_at.reset();
        signal_tree_locked(child, SIGKILL);
      }
      if (child.exit_code) {
        if (child.cgroup.exists()) {
          if (child.cgroup.populated()) {
            if (auto failed = child.cgroup.kill()) std::fprintf(stderr, "muster local backend: %s\n", failed->c_str());
          } else {
            child.cgroup.remove();
            child.cleaned = !child.cgroup.exists();
          }
        } else {
          // The agent ends its script's leftovers itself; what stays in the
          // group now has nobody else to end it.
          if (group_tree_alive(child.id)) {
            base::signal_group(child.id, SIGKILL);
          } else {
            child.cleaned = true;
          }
        }
      }
      // Nothing of the tree is left to kill: its deadline is over too (a
      // deadline left behind would wake the reaper at once, forever). The
      // limits' v1 directories go too, where a killed agent left them.
      if (child.cleaned) {
        child.kill_at.reset();
        base::sweep_abandoned_limits(base::CgroupMounts::of_this_process());
      }
    }
    if (child.cleaned && child.forgotten) {
      unwatch_locked(child);
      it = children_.erase(it);
    } else {
      ++it;
    }
  }
}

api::Status LocalBackend::launch(const std::vector<LaunchSpec>& specs) {
  std::vector<std::string> started;
  auto undo = [&] {
    for (const auto& id : started) {
      if (auto s = stop(id, std::chrono::milliseconds(0)); !s) std::fprintf(stderr, "%s\n", s.message().c_str());
    }
  };
  for (const auto& spec : specs) {
    if (spec.agent_argv.empty()) {
      undo();
      return api::invalid_argument("worker " + spec.worker_id + ": empty agent command");
    }
    // The agent makes this cgroup and joins it before anything forks (off
    // this thread, so a launch of n workers does not pay n mkdirs in turn).
    base::Cgroup cgroup;
    if (cgroups_) cgroup = base::Cgroup(cgroups_->path() / spec.worker_id);
    // Own session and group; the daemon's listener and blocked signals stay
    // behind (an agent outliving a killed daemon must not hold its port).
    base::SpawnOptions o;
    o.argv = spec.agent_argv;
    o.env = spec.env;
    o.env[api::kEnvCgroup] = cgroup.valid() ? cgroup.path().string() : std::string(api::kCgroupNone);
    o.cwd = spec.working_dir;
    o.output = spec.log_path;
    o.new_session = true;
    auto spawned = base::spawn(o);
    if (spawned.failure) {
      undo();
      return api::internal_error("worker " + spec.worker_id + ": " + *spawned.failure);
    }
    std::lock_guard<std::mutex> lock(mu_);
    Child& child = children_[spec.worker_id];
    unwatch_locked(child);  // a worker id launched again
    child = Child();
    child.id = spawned.id;
    child.cgroup = cgroup;
    watch_locked(spec.worker_id, child);
    started.push_back(spec.worker_id);
  }
  return api::Status::ok();
}

void LocalBackend::reap_locked(Child& child, bool ask) {
  if (child.exit_code) return;
  if (child.pidfd >= 0 && !child.ended && !ask) return;  // the reaper thread hears of the end
  if (child.ours) {
    child.exit_code = base::try_reap(child.id.pid);
  } else if (child.ended || !base::alive(child.id)) {
    child.exit_code = -1;  // an adopted agent: not our child, its code is not ours to read
  }
  // Ended and reaped, or (never seen) a pidfd that says ended before the
  // pid can be reaped: either way not watched any more (a readable pidfd
  // left in epoll would wake the reaper at once, forever); the pass polls.
  if (child.exit_code || child.ended) unwatch_locked(child);
}

void LocalBackend::signal_tree_locked(const Child& child, int sig) {
  if (child.cgroup.exists()) {
    base::signal_group(child.id, sig);  // the agent too, in case it has not joined its cgroup yet
    if (sig == SIGKILL) {
      const base::Failure killed = child.cgroup.kill();
      if (!killed) return;
    }
    child.cgroup.signal(sig);
    return;
  }
  // Without a cgroup: the group, and every descendant of the agent (those
  // that left the group with setsid, and orphans re-parented to the agent).
  const auto below = base::descendants(child.id);
  base::signal_group(child.id, sig);
  for (const auto& p : below) base::signal_process(p, sig);
}

bool LocalBackend::tree_alive_locked(const Child& child) {
  if (child.cgroup.exists()) return child.cgroup.populated() || base::alive(child.id);
  return group_tree_alive(child.id);
}

bool LocalBackend::tree_alive(const std::string& worker_id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = children_.find(worker_id);
  if (it == children_.end()) return false;
  reap_locked(it->second, /*ask=*/true);
  return tree_alive_locked(it->second);
}

api::Status LocalBackend::stop(const std::string& worker_id, std::chrono::milliseconds grace) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = children_.find(worker_id);
    if (it == children_.end()) return api::Status::ok();
    Child& child = it->second;
    reap_locked(child, /*ask=*/true);
    if (child.cleaned || !tree_alive_locked(child)) return api::Status::ok();  // nothing left: signal nobody
    signal_tree_locked(child, grace.count() > 0 ? SIGTERM : SIGKILL);
    const auto kill_at = Clock::now() + grace;
    if (!child.kill_at || kill_at < *child.kill_at) child.kill_at = kill_at;
  }
  wake_reaper();
  return api::Status::ok();
}

ProcessStatus LocalBackend::poll(const std::string& worker_id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = children_.find(worker_id);
  if (it == children_.end()) return {ProcessState::kUnknown, std::nullopt};
  reap_locked(it->second, /*ask=*/false);
  if (it->second.exit_code) return {ProcessState::kExited, it->second.exit_code};
  return {ProcessState::kRunning, std::nullopt};
}

std::string LocalBackend::process_identity(const std::string& worker_id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = children_.find(worker_id);
  if (it == children_.end() || !it->second.id.valid()) return "";
  std::string out = it->second.id.to_string();
  if (it->second.cgroup.valid()) out += "@" + it->second.cgroup.path().string();
  return out;
}

void LocalBackend::adopt(const std::string& worker_id, const std::string& identity) {
  const auto at = identity.find('@');
  auto id = base::ProcessId::parse(identity.substr(0, at));
  if (!id) return;
  Child child;
  child.id = *id;
  child.ours = false;
  if (at != std::string::npos) child.cgroup = base::Cgroup(identity.substr(at + 1));
  std::lock_guard<std::mutex> lock(mu_);
  if (children_.count(worker_id)) return;
  Child& adopted = children_[worker_id] = child;
  watch_locked(worker_id, adopted);
  // The pidfd names whoever holds the pid now: only an agent whose identity
  // still held once it was open is watched through it.
  if (!base::alive(adopted.id)) unwatch_locked(adopted);
}

void LocalBackend::forget(const std::string& worker_id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = children_.find(worker_id);
  if (it == children_.end()) return;
  if (it->second.cleaned) {
    unwatch_locked(it->second);
    children_.erase(it);
  } else {
    it->second.forgotten = true;
  }
}

void LocalBackend::shutdown() {
  if (!options_.stop_on_shutdown) return;
  std::vector<std::string> ids;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [id, child] : children_) ids.push_back(id);
  }
  for (const auto& id : ids) {
    if (auto s = stop(id, std::chrono::seconds(2)); !s) std::fprintf(stderr, "%s\n", s.message().c_str());
  }
  // At shutdown the daemon waits for what it ends.
  const auto deadline = Clock::now() + std::chrono::seconds(5);
  for (const auto& id : ids) {
    while (tree_alive(id) && Clock::now() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

}  // namespace muster::workers::local
