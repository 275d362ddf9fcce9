// The real Executor: fork + exec with argv vectors, no shell. Between fork and
// exec the child only makes system calls (setns, unshare, sethostname, dup2,
// chdir), all prepared before the fork, so it is safe in a threaded daemon.
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

#include "muster/workers/container/executor.h"

namespace muster::workers::container {
namespace {

int decode_wait_status(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return -1;
}

std::vector<char*> c_argv(std::vector<std::string>& strings) {
  std::vector<char*> out;
  for (auto& s : strings) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

class SystemExecutor final : public Executor {
 public:
  CommandResult run(const std::vector<std::string>& argv) override {
    CommandResult result;
    if (argv.empty()) return result;
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0) {
      result.output = std::string("pipe: ") + std::strerror(errno);
      return result;
    }
    std::vector<std::string> args = argv;
    std::vector<char*> cargs = c_argv(args);
    int devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
    pid_t pid = fork();
    if (pid == 0) {
      dup2(devnull, 0);
      dup2(fds[1], 1);
      dup2(fds[1], 2);
      execvp(cargs[0], cargs.data());
      _exit(127);
    }
    close(fds[1]);
    if (devnull >= 0) close(devnull);
    if (pid < 0) {
      close(fds[0]);
      result.output = std::string("fork: ") + std::strerror(errno);
      return result;
    }
    char buf[4096];
    ssize_t n;
    while ((n = read(fds[0], buf, sizeof buf)) > 0 || (n < 0 && errno == EINTR)) {
      if (n > 0) result.output.append(buf, static_cast<size_t>(n));
    }
    close(fds[0]);
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    result.exit_code = decode_wait_status(status);
    return result;
  }

  api::Result<pid_t> spawn(const SpawnSpec& spec) override {
    if (spec.argv.empty()) return api::invalid_argument("spawn: empty argv");
    std::vector<std::string> args = spec.argv;
    std::vector<char*> cargs = c_argv(args);
    std::vector<std::string> env_strings;
    for (const auto& [k, v] : spec.env) env_strings.push_back(k + "=" + v);
    std::vector<char*> cenv = c_argv(env_strings);

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
    std::string log = spec.log_path.empty() ? std::string("/dev/null") : spec.log_path.string();
    int log_fd = open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    int devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
    std::string cwd = spec.cwd.string();
    const std::string& hostname = spec.new_hostname;

    pid_t pid = fork();
    if (pid == 0) {
      setpgid(0, 0);
      if (netns_fd >= 0 && setns(netns_fd, CLONE_NEWNET) != 0) _exit(121);
      if (uts_fd >= 0 && setns(uts_fd, CLONE_NEWUTS) != 0) _exit(122);
      if (!hostname.empty()) {
        if (unshare(CLONE_NEWUTS) != 0) _exit(123);
        if (sethostname(hostname.data(), hostname.size()) != 0) _exit(124);
      }
      if (devnull >= 0) dup2(devnull, 0);
      if (log_fd >= 0) {
        dup2(log_fd, 1);
        dup2(log_fd, 2);
      }
      if (!cwd.empty() && chdir(cwd.c_str()) != 0) _exit(125);
      sigset_t none;
      sigemptyset(&none);
      sigprocmask(SIG_SETMASK, &none, nullptr);
      execve(cargs[0], cargs.data(), cenv.data());
      _exit(127);
    }
    int saved_errno = errno;
    for (int fd : {netns_fd, uts_fd, log_fd, devnull})
      if (fd >= 0) close(fd);
    if (pid < 0) return api::internal_error(std::string("fork: ") + std::strerror(saved_errno));
    setpgid(pid, pid);  // also from the parent, so kill_group works at once
    return pid;
  }

  std::optional<int> try_wait(pid_t pid) override {
    int status = 0;
    pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid) return decode_wait_status(status);
    if (r < 0 && errno == ECHILD) return -1;  // not ours / already reaped
    return std::nullopt;
  }

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
