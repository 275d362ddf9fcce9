#include "service/cluster/launcher.h"

#include <signal.h>
#include <unistd.h>

#include <set>
#include <thread>

#include "service/cluster/launcher_keeper.h"

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

// The keeper we started (a child: reaped here) or one an earlier daemon
// started (adopted: its exit file says how the job ended).
class KeptLauncherProcess final : public LauncherProcess {
 public:
  KeptLauncherProcess(base::ProcessId id, std::filesystem::path exit_file, bool child)
      : id_(id), exit_file_(std::move(exit_file)), child_(child) {}
  ~KeptLauncherProcess() override {
    if (!detached_) terminate(std::chrono::milliseconds(2000));
  }

  std::optional<int> poll() override {
    if (exit_code_) return exit_code_;
    if (child_) {
      auto code = base::try_reap(id_.pid);
      if (code && *code >= 0) exit_code_ = code;
      if (!code || *code >= 0) return exit_code_;
    }
    // Adopted (or no longer reapable): the keeper's record, else its death.
    if (auto code = read_keeper_exit(exit_file_)) {
      exit_code_ = code;
    } else if (!base::alive(id_)) {
      exit_code_ = read_keeper_exit(exit_file_).value_or(128 + SIGKILL);
    }
    return exit_code_;
  }

  void terminate(std::chrono::milliseconds grace) override {
    if (terminated_) return;
    terminated_ = true;
    end_tree(id_, grace, [this] { return poll().has_value(); });
    if (!exit_code_ && child_) {
      const int code = base::wait_exit(id_.pid);
      if (code >= 0) exit_code_ = code;
    }
    if (!exit_code_) exit_code_ = 128 + SIGKILL;
  }

  void detach() override { detached_ = true; }
  base::ProcessId identity() const override { return id_; }

 private:
  base::ProcessId id_;
  std::filesystem::path exit_file_;
  bool child_;
  std::optional<int> exit_code_;
  bool terminated_ = false;
  bool detached_ = false;
};

class ProcessLauncher final : public Launcher {
 public:
  explicit ProcessLauncher(LauncherOptions options) : options_(std::move(options)) {}

  api::Result<std::unique_ptr<LauncherProcess>> start(const LauncherSpec& spec) override {
    if (spec.argv.empty()) return api::internal_error("launcher: empty command line");
    if (!base::find_on_path(spec.argv[0])) {
      return api::unavailable("launcher: " + spec.argv[0] + " is not on the daemon's PATH");
    }
    std::error_code ec;
    std::filesystem::create_directories(spec.log_path.parent_path(), ec);
    KeeperOptions k;
    k.log = std::filesystem::absolute(spec.log_path, ec);
    k.limits = options_.limits;
    k.exit_file = spec.exit_file.empty() ? k.log.parent_path() / "launcher.exit"
                                         : std::filesystem::absolute(spec.exit_file, ec);
    k.tagged = spec.tagged_output;
    k.argv = spec.argv;
    std::filesystem::remove(k.exit_file, ec);  // a restart's launcher writes its own
    base::SpawnOptions o;
    o.argv = to_keeper_argv(options_.keeper_path.string(), k);
    o.env = spec.env;
    o.cwd = spec.working_dir;
    o.output = k.log;  // the keeper's own complaints, if it cannot open the log
    o.new_session = true;
    auto spawned = base::spawn(o);
    if (spawned.failure) return api::internal_error("launcher: " + *spawned.failure);
    return std::unique_ptr<LauncherProcess>(new KeptLauncherProcess(spawned.id, k.exit_file, true));
  }

  std::unique_ptr<LauncherProcess> adopt(const base::ProcessId& keeper,
                                         const std::filesystem::path& exit_file) override {
    if (!read_keeper_exit(exit_file) && !(keeper.valid() && base::alive(keeper))) return nullptr;
    return std::make_unique<KeptLauncherProcess>(keeper, exit_file, false);
  }

  bool end_orphan(const base::ProcessId& leader, std::chrono::milliseconds grace) override {
    if (!leader.valid() || (tree_of(leader).empty() && !base::alive(leader))) return false;
    end_tree(leader, grace, [&] { return !base::alive(leader); });
    return true;
  }

 private:
  LauncherOptions options_;
};

}  // namespace

std::unique_ptr<Launcher> make_process_launcher(LauncherOptions options) {
  if (options.keeper_path.empty()) {
    std::error_code ec;
    options.keeper_path = std::filesystem::read_symlink("/proc/self/exe", ec).parent_path() / "muster-launcher";
  }
  return std::make_unique<ProcessLauncher>(std::move(options));
}

}  // namespace muster::service
