#include "muster/service/cluster_launcher.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <map>
#include <sstream>
#include <set>
#include <thread>

#include <boost/process.hpp>
#include <boost/process/extend.hpp>

namespace muster::service {
namespace {

namespace bp = boost::process;

// A process as /proc shows it; the start time tells a pid apart from a later
// process that reuses it.
struct ProcId {
  pid_t pid = 0;
  unsigned long long start = 0;
  bool operator<(const ProcId& o) const { return pid < o.pid || (pid == o.pid && start < o.start); }
};

// pid -> (ppid, start time) of every process, from /proc/<pid>/stat.
std::map<pid_t, std::pair<pid_t, unsigned long long>> process_table() {
  std::map<pid_t, std::pair<pid_t, unsigned long long>> out;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/proc", ec)) {
    const std::string name = entry.path().filename().string();
    if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream in(entry.path() / "stat");
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const auto close = text.rfind(')');
    if (close == std::string::npos) continue;
    // After "pid (comm) ": state ppid pgrp session tty tpgid flags minflt
    // cminflt majflt cmajflt utime stime cutime cstime priority nice
    // num_threads itrealvalue starttime ...
    std::istringstream rest(text.substr(close + 2));
    std::string state;
    long long fields[19] = {};
    rest >> state;
    for (auto& f : fields) rest >> f;
    out[static_cast<pid_t>(std::stoll(name))] = {static_cast<pid_t>(fields[0]),
                                                 static_cast<unsigned long long>(fields[18])};
  }
  return out;
}

// Every live descendant of `root` (children that left the process group
// included, e.g. MPI ranks started with setsid).
std::set<ProcId> descendants(pid_t root) {
  const auto table = process_table();
  std::set<ProcId> out;
  std::vector<pid_t> frontier = {root};
  while (!frontier.empty()) {
    const pid_t parent = frontier.back();
    frontier.pop_back();
    for (const auto& [pid, info] : table) {
      if (info.first == parent && out.insert({pid, info.second}).second) frontier.push_back(pid);
    }
  }
  return out;
}

void signal_if_same(const ProcId& p, int sig) {
  const auto table = process_table();
  auto it = table.find(p.pid);
  if (it != table.end() && it->second.second == p.start) ::kill(p.pid, sig);
}

class ProcessLauncherProcess final : public LauncherProcess {
 public:
  explicit ProcessLauncherProcess(bp::child child) : child_(std::move(child)), pgid_(child_.id()) {}

  ~ProcessLauncherProcess() override { terminate(std::chrono::milliseconds(2000)); }

  std::optional<int> poll() override {
    if (exit_code_) return exit_code_;
    std::error_code ec;
    if (child_.running(ec)) return std::nullopt;
    exit_code_ = decode(child_.native_exit_code());
    return exit_code_;
  }

  // SIGTERM to the group and every descendant (mpirun forwards it to its
  // job), SIGKILL to whatever is left after `grace`.
  void terminate(std::chrono::milliseconds grace) override {
    if (terminated_) return;
    terminated_ = true;
    std::set<ProcId> tree;
    if (!poll()) tree = descendants(pgid_);
    // The group may outlive its leader (ranks still exiting): signal it even
    // when the leader itself has ended.
    ::killpg(pgid_, SIGTERM);
    for (const auto& p : tree) signal_if_same(p, SIGTERM);
    const auto deadline = std::chrono::steady_clock::now() + grace;
    while (!poll() && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    if (!poll()) {
      for (const auto& p : descendants(pgid_)) tree.insert(p);
    }
    ::killpg(pgid_, SIGKILL);
    for (const auto& p : tree) signal_if_same(p, SIGKILL);
    std::error_code ec;
    if (child_.valid() && !exit_code_) {
      child_.wait(ec);
      exit_code_ = decode(child_.native_exit_code());
    }
  }

 private:
  static int decode(int status) {
    if (WIFEXITED(status)) return WEXITSTATUS(status);
    if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
    return -1;
  }

  bp::child child_;
  pid_t pgid_;
  std::optional<int> exit_code_;
  bool terminated_ = false;
};

class ProcessLauncher final : public Launcher {
 public:
  api::Result<std::unique_ptr<LauncherProcess>> start(const LauncherSpec& spec) override {
    if (spec.argv.empty()) return api::internal_error("launcher: empty command line");
    boost::filesystem::path exe = spec.argv[0];
    if (spec.argv[0].find('/') == std::string::npos) {
      exe = bp::search_path(spec.argv[0]);
      if (exe.empty()) return api::unavailable("launcher: " + spec.argv[0] + " is not on the daemon's PATH");
    }
    std::vector<std::string> args(spec.argv.begin() + 1, spec.argv.end());
    bp::environment env = boost::this_process::environment();
    for (const auto& [k, v] : spec.env) env[k] = v;
    std::error_code ec;
    std::filesystem::create_directories(spec.log_path.parent_path(), ec);
    FILE* log = std::fopen(spec.log_path.c_str(), "a");
    if (log == nullptr) return api::internal_error("launcher: cannot open log " + spec.log_path.string());
    try {
      bp::child child(exe, bp::args(args), env, bp::start_dir(spec.working_dir.string()), bp::std_in < bp::null,
                      bp::std_out > log, bp::std_err > log,
                      bp::extend::on_exec_setup([](auto&) { ::setpgid(0, 0); }));
      std::fclose(log);
      // Also from this side, so the group exists before we might signal it.
      ::setpgid(child.id(), child.id());
      return std::unique_ptr<LauncherProcess>(new ProcessLauncherProcess(std::move(child)));
    } catch (const std::exception& e) {
      std::fclose(log);
      return api::internal_error("launcher: cannot start " + spec.argv[0] + ": " + e.what());
    }
  }
};

}  // namespace

std::unique_ptr<Launcher> make_process_launcher() { return std::make_unique<ProcessLauncher>(); }

}  // namespace muster::service
