#include "api/base/run_capture.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "api/base/process.h"

namespace muster::base {

Captured run_capture(const std::vector<std::string>& argv, const CaptureOptions& options) {
  Captured result;
  if (argv.empty()) {
    result.failure = std::string("run_capture: no program given");
    return result;
  }
  int out_pipe[2] = {-1, -1};
  int err_pipe[2] = {-1, -1};
  if (::pipe2(out_pipe, O_CLOEXEC) != 0 || (!options.merge_stderr && ::pipe2(err_pipe, O_CLOEXEC) != 0)) {
    result.failure = std::string("pipe: ") + std::strerror(errno);
    for (int fd : {out_pipe[0], out_pipe[1]}) {
      if (fd >= 0) ::close(fd);
    }
    return result;
  }
  SpawnOptions o;
  o.argv = argv;
  o.output_fd = out_pipe[1];  // stdout, and stderr too unless error_fd is given
  o.error_fd = err_pipe[1];
  o.new_session = false;
  const Spawned spawned = spawn(o);
  for (int fd : {out_pipe[1], err_pipe[1]}) {
    if (fd >= 0) ::close(fd);
  }
  if (spawned.failure) {
    for (int fd : {out_pipe[0], err_pipe[0]}) {
      if (fd >= 0) ::close(fd);
    }
    result.failure = spawned.failure;
    return result;
  }
  const pid_t pid = spawned.id.pid;
  const bool bounded = options.timeout.count() > 0;
  const auto deadline = std::chrono::steady_clock::now() + options.timeout;
  pollfd fds[2] = {{out_pipe[0], POLLIN, 0}, {err_pipe[0], POLLIN, 0}};
  std::string* sinks[2] = {&result.out, &result.err};
  int open_fds = err_pipe[0] >= 0 ? 2 : 1;
  while (open_fds > 0) {
    int wait_ms = -1;
    if (bounded) {
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) {
        ::kill(pid, SIGKILL);
        result.timed_out = true;
        break;
      }
      wait_ms = static_cast<int>(left.count());
    }
    if (::poll(fds, 2, wait_ms) < 0 && errno != EINTR) break;
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || !(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      char buf[8192];
      const ssize_t n = ::read(fds[i].fd, buf, sizeof buf);
      if (n > 0) {
        sinks[i]->append(buf, static_cast<size_t>(n));
      } else if (n == 0 || errno != EINTR) {
        ::close(fds[i].fd);
        fds[i].fd = -1;
        --open_fds;
      }
    }
  }
  for (auto& f : fds) {
    if (f.fd >= 0) ::close(f.fd);
  }
  const int code = wait_exit(pid);
  result.exit_code = result.timed_out ? -1 : code;
  return result;
}

}  // namespace muster::base
