// The real Executor: argv vectors, no shell, every child started through
// base::spawn (clean signal state, no inherited descriptors). A child that
// joins namespaces takes the floor's fork + exec path, where it only makes
// system calls (setns, unshare, sethostname), all prepared before the fork,
// so it is safe in a threaded daemon.
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>

#include "api/base/process.h"
#include "api/base/run_capture.h"
#include "workers/container/executor.h"

namespace muster::workers::container {
namespace {

class SystemExecutor final : public Executor {
 public:
  CommandResult run(const std::vector<std::string>& argv) override {
    CommandResult result;
    if (argv.empty()) return result;
    const base::Captured c = base::run_capture(argv, {std::chrono::milliseconds(0), /*merge_stderr=*/true});
    if (c.failure) {
      result.output = *c.failure;
      result.exit_code = 127;
      return result;
    }
    result.output = c.out;
    result.exit_code = c.exit_code;
    return result;
  }

  // fork + exec through the floor: the child joins the namespaces (all
  // descriptors opened here, before the fork) and then starts clean.
  api::Result<pid_t> spawn(const SpawnSpec& spec) override {
    if (spec.argv.empty()) return api::invalid_argument("spawn: empty argv");
    int netns_fd = -1;
    if (!spec.netns.empty()) {
      std::string path = "/run/netns/" + spec.netns;
      netns_fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
      if (netns_fd < 0)
        return api::internal_error("cannot open network namespace " + path + ": " + std::strerror(errno));
    }
    int uts_fd = -1;
    if (spec.join_uts_of != 0) {
      std::string path = "/proc/" + std::to_string(spec.join_uts_of) + "/ns/uts";
      uts_fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
      if (uts_fd < 0) {
        if (netns_fd >= 0) close(netns_fd);
        return api::internal_error("cannot open UTS namespace " + path + ": " + std::strerror(errno));
      }
    }
    const std::string hostname = spec.new_hostname;
    base::SpawnOptions o;
    o.argv = spec.argv;
    o.inherit_env = false;
    o.env = spec.env;
    o.cwd = spec.cwd;
    o.output = spec.log_path.empty() ? std::filesystem::path("/dev/null") : spec.log_path;
    o.new_session = false;
    o.new_process_group = true;
    o.child_setup = [netns_fd, uts_fd, &hostname]() -> int {
      if (netns_fd >= 0 && setns(netns_fd, CLONE_NEWNET) != 0) return 121;
      if (uts_fd >= 0 && setns(uts_fd, CLONE_NEWUTS) != 0) return 122;
      if (!hostname.empty()) {
        if (unshare(CLONE_NEWUTS) != 0) return 123;
        if (sethostname(hostname.data(), hostname.size()) != 0) return 124;
      }
      return 0;
    };
    auto spawned = base::spawn(o);
    for (int fd : {netns_fd, uts_fd})
      if (fd >= 0) close(fd);
    if (spawned.failure) return api::internal_error("spawn: " + *spawned.failure);
    return spawned.id.pid;
  }

  std::optional<int> try_wait(pid_t pid) override { return base::try_reap(pid); }

  void kill_group(pid_t pgid, int signal) override {
    if (pgid > 1) ::kill(-pgid, signal);
  }
  void kill_process(pid_t pid, int signal) override {
    if (pid > 1) ::kill(pid, signal);
  }
  bool process_alive(pid_t pid) override { return pid > 1 && ::kill(pid, 0) == 0; }

  std::string read_file(const std::filesystem::path& path) override {
    std::ifstream in(path);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }
  void sleep_for(std::chrono::milliseconds duration) override { std::this_thread::sleep_for(duration); }
  bool is_root() override { return geteuid() == 0; }
};

}  // namespace

std::unique_ptr<Executor> make_system_executor() { return std::make_unique<SystemExecutor>(); }

}  // namespace muster::workers::container
