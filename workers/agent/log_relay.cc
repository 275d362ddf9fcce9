#include "workers/agent/log_relay.h"

#include "api/base/process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

namespace muster::workers::agent {

namespace {

void write_fd(int fd, const char* data, size_t n) {
  while (n > 0) {
    const ssize_t w = ::write(fd, data, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return;
    data += w;
    n -= static_cast<size_t>(w);
  }
}

}  // namespace

int run_log_relay(int in_fd, const api::LogCapture& capture) {
  // Writers end the relay by closing the pipe, never by a signal meant for
  // the worker or the launcher.
  ::signal(SIGTERM, SIG_IGN);
  ::signal(SIGINT, SIG_IGN);
  ::signal(SIGHUP, SIG_IGN);
  std::string error;
  auto log = base::RotatingLog::open(capture.path, capture.options, &error);
  if (!log) {
    const std::string line = "[muster-agent] log relay: " + error + "; writing output uncapped\n";
    write_fd(1, line.data(), line.size());
  }
  std::vector<char> buf(256 << 10);
  for (;;) {
    const ssize_t n = ::read(in_fd, buf.data(), buf.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    if (!log) {
      write_fd(1, buf.data(), static_cast<size_t>(n));
      continue;
    }
    if (auto failure = log->write(std::string_view(buf.data(), static_cast<size_t>(n)))) {
      // A full disk: say so once on the relay's own stderr (the backend's
      // file, or the daemon's log), keep draining so writers never block.
      const std::string line = "[muster-agent] log relay: " + *failure + "\n";
      write_fd(2, line.data(), line.size());
    }
  }
  return log ? 0 : 1;
}

CaptureStarted start_log_capture(const api::LogCapture& capture) {
  CaptureStarted out;
  std::error_code ec;
  const auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) {
    out.failure = "cannot find the agent's own program: " + ec.message();
    return out;
  }
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) {
    out.failure = std::string("pipe: ") + std::strerror(errno);
    return out;
  }
  // The relay is this program again (--log-relay), with an empty
  // environment: nothing about it looks like the worker's agent, and it
  // holds none of the worker's credentials.
  base::SpawnOptions o;
  o.argv = api::to_log_relay_argv(self.string(), capture);
  o.inherit_env = false;
  o.input_fd = fds[0];
  o.new_session = false;
  o.new_process_group = true;  // signals to the worker's group do not reach it: it drains, then exits
  std::fflush(stdout);
  std::fflush(stderr);
  auto spawned = base::spawn(o);
  ::close(fds[0]);
  if (spawned.failure) {
    ::close(fds[1]);
    out.failure = *spawned.failure;
    return out;
  }
  ::dup2(fds[1], STDOUT_FILENO);
  ::dup2(fds[1], STDERR_FILENO);
  ::close(fds[1]);
  out.relay = spawned.id.pid;
  return out;
}

bool finish_log_capture(pid_t relay, std::chrono::milliseconds patience) {
  if (relay <= 0) return true;
  std::fflush(stdout);
  std::fflush(stderr);
  const int null = ::open("/dev/null", O_WRONLY | O_CLOEXEC);
  if (null >= 0) {
    ::dup2(null, STDOUT_FILENO);
    ::dup2(null, STDERR_FILENO);
    ::close(null);
  }
  const auto deadline = std::chrono::steady_clock::now() + patience;
  for (;;) {
    int status = 0;
    const pid_t r = ::waitpid(relay, &status, WNOHANG);
    if (r == relay || (r < 0 && errno != EINTR)) return true;
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

}  // namespace muster::workers::agent
