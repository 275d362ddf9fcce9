#include "service/cluster_launcher.h"

#include <signal.h>

#include <set>
#include <thread>

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
  explicit ProcessLauncherProcess(base::ProcessId id) : id_(id) {}
  ~ProcessLauncherProcess() override { terminate(std::chrono::milliseconds(2000)); }

  std::optional<int> poll() override {
    if (!exit_code_) exit_code_ = base::try_reap(id_.pid);
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
  base::ProcessId id_;
  std::optional<int> exit_code_;
  bool terminated_ = false;
};

class ProcessLauncher final : public Launcher {
 public:
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
    auto spawned = base::spawn(o);
    if (spawned.failure) {
      const bool missing = spawned.failure->find("not found on PATH") != std::string::npos;
      if (missing) return api::unavailable("launcher: " + spec.argv[0] + " is not on the daemon's PATH");
      return api::internal_error("launcher: " + *spawned.failure);
    }
    return std::unique_ptr<LauncherProcess>(new ProcessLauncherProcess(spawned.id));
  }

  bool end_orphan(const base::ProcessId& leader, std::chrono::milliseconds grace) override {
    if (!leader.valid() || (tree_of(leader).empty() && !base::alive(leader))) return false;
    end_tree(leader, grace, [&] { return !base::alive(leader); });
    return true;
  }
};

}  // namespace

std::unique_ptr<Launcher> make_process_launcher() { return std::make_unique<ProcessLauncher>(); }

}  // namespace muster::service
