#include "muster/service/cluster_launcher.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <thread>

#include <boost/process.hpp>
#include <boost/process/extend.hpp>

namespace muster::service {
namespace {

namespace bp = boost::process;

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

  void terminate(std::chrono::milliseconds grace) override {
    if (terminated_) return;
    terminated_ = true;
    // The group may outlive its leader (ranks still exiting): signal it even
    // when mpirun itself has ended.
    ::killpg(pgid_, SIGTERM);
    const auto deadline = std::chrono::steady_clock::now() + grace;
    while (!poll() && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    ::killpg(pgid_, SIGKILL);
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
