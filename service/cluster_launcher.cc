#include "service/cluster_launcher.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <set>
#include <thread>

#include "api/log_capture.h"

namespace muster::service {
namespace {

using Clock = std::chrono::steady_clock;

// Everything that belongs to the launcher `leader`: its group, its session
// and its descendants (by parent links), each with its start time.
std::set<base::ProcessId> tree_of(const base::ProcessId& leader) {
  std::set<base::ProcessId> out;
  for (const auto& p : base::session_members(leader)) out.insert(p);
  for (const auto& p : base::descendants(leader)) out.insert(p);
  return out;
}

bool any_alive(const std::set<base::ProcessId>& tree) {
  for (const auto& p : tree) {
    if (base::alive(p)) return true;
  }
  return false;
}

// SIGTERM to the tree (mpirun forwards it to its job), SIGKILL to whatever
// is left after `grace`, then up to 2 s for it to go. `leader_done` says
// whether the leader ended (a child of ours must be reaped to say so).
template <typename LeaderDone>
void end_tree(const base::ProcessId& leader, std::chrono::milliseconds grace, LeaderDone leader_done) {
  std::set<base::ProcessId> tree = tree_of(leader);
  (void)base::signal_group(leader, SIGTERM);
  for (const auto& p : tree) (void)base::signal_process(p, SIGTERM);
  const auto deadline = Clock::now() + grace;
  while (Clock::now() < deadline && (!leader_done() || any_alive(tree))) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    for (const auto& p : tree_of(leader)) tree.insert(p);
  }
  for (const auto& p : tree_of(leader)) tree.insert(p);
  (void)base::signal_group(leader, SIGKILL);
  for (const auto& p : tree) (void)base::signal_process(p, SIGKILL);
  const auto gone = Clock::now() + std::chrono::seconds(2);
  while (Clock::now() < gone && (!leader_done() || any_alive(tree))) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

class ProcessLauncherProcess final : public LauncherProcess {
 public:
  ProcessLauncherProcess(base::ProcessId id, pid_t relay) : id_(id), relay_(relay) {}
  ~ProcessLauncherProcess() override {
    terminate(std::chrono::milliseconds(2000));
    reap_relay(std::chrono::milliseconds(2000));
  }

  std::optional<int> poll() override {
    if (!exit_code_) exit_code_ = base::try_reap(id_.pid);
    if (exit_code_) reap_relay(std::chrono::milliseconds(0));
    return exit_code_;
  }

  void terminate(std::chrono::milliseconds grace) override {
    if (terminated_) return;
    terminated_ = true;
    end_tree(id_, grace, [this] { return poll().has_value(); });
    if (!exit_code_) exit_code_ = base::wait_exit(id_.pid);
  }

  base::ProcessId identity() const override { return id_; }

 private:
  // The relay ends once the launcher's tree has closed the pipe; it is our
  // child, so it is reaped here (bounded: an escaped rank may hold the pipe).
  void reap_relay(std::chrono::milliseconds patience) {
    const auto deadline = Clock::now() + patience;
    while (relay_ > 0) {
      if (base::try_reap(relay_)) {
        relay_ = -1;
        return;
      }
      if (Clock::now() >= deadline) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }

  base::ProcessId id_;
  pid_t relay_ = -1;
  std::optional<int> exit_code_;
  bool terminated_ = false;
};

// A pipe whose ends close themselves.
struct Pipe {
  int read = -1, write = -1;
  ~Pipe() {
    if (read >= 0) ::close(read);
    if (write >= 0) ::close(write);
  }
};

class ProcessLauncher final : public Launcher {
 public:
  explicit ProcessLauncher(std::optional<LauncherLogRelay> relay) : relay_(std::move(relay)) {}

  // With a relay: a) a pipe; b) the relay (`muster-agent --log-relay`, a
  // session of its own, so ending the launcher's tree leaves it to drain)
  // reads it into log_path with the cap; c) the launcher writes into it;
  // d) our ends are closed, so the relay ends when the launcher's tree has.
  api::Result<std::unique_ptr<LauncherProcess>> start(const LauncherSpec& spec) override {
    if (spec.argv.empty()) return api::internal_error("launcher: empty command line");
    std::error_code ec;
    std::filesystem::create_directories(spec.log_path.parent_path(), ec);
    base::SpawnOptions o;
    o.argv = spec.argv;
    o.env = spec.env;
    o.cwd = spec.working_dir;
    o.output = spec.log_path;
    o.new_session = true;
    Pipe pipe;
    pid_t relay = -1;
    if (relay_) {
      int fds[2];
      if (::pipe2(fds, O_CLOEXEC) != 0) return api::internal_error("launcher: pipe for its log failed");
      pipe.read = fds[0];
      pipe.write = fds[1];
      base::SpawnOptions r;
      r.argv = api::to_log_relay_argv(relay_->agent_path.string(), {spec.log_path.string(), relay_->limits});
      r.input_fd = pipe.read;
      r.output = spec.log_path;  // the relay's own complaints, if it cannot open the log
      r.new_session = true;
      auto started = base::spawn(r);
      if (started.failure) return api::internal_error("launcher: its log relay: " + *started.failure);
      relay = started.id.pid;
      o.output.clear();
      o.output_fd = pipe.write;
    }
    auto spawned = base::spawn(o);
    if (pipe.read >= 0) {
      ::close(pipe.read);
      ::close(pipe.write);
      pipe.read = pipe.write = -1;  // the relay sees end of file once the launcher's tree is gone
    }
    if (spawned.failure) {
      if (relay > 0) (void)base::wait_exit(relay);  // it read end of file at once
      const bool missing = spawned.failure->find("not found on PATH") != std::string::npos;
      if (missing) return api::unavailable("launcher: " + spec.argv[0] + " is not on the daemon's PATH");
      return api::internal_error("launcher: " + *spawned.failure);
    }
    return std::unique_ptr<LauncherProcess>(new ProcessLauncherProcess(spawned.id, relay));
  }

  bool end_orphan(const base::ProcessId& leader, std::chrono::milliseconds grace) override {
    if (!leader.valid() || (tree_of(leader).empty() && !base::alive(leader))) return false;
    end_tree(leader, grace, [&] { return !base::alive(leader); });
    return true;
  }

 private:
  std::optional<LauncherLogRelay> relay_;
};

}  // namespace

std::unique_ptr<Launcher> make_process_launcher(std::optional<LauncherLogRelay> relay) {
  return std::make_unique<ProcessLauncher>(std::move(relay));
}

}  // namespace muster::service
