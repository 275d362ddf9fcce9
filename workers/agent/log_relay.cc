#include "workers/agent/log_relay.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
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

// Zeroes the block the kernel placed the process's environment in (what
// /proc/<pid>/environ reads), so a forked relay holds no copy of the agent's
// token. Its bounds are fields 50 and 51 of /proc/self/stat.
void scrub_initial_environment() {
  std::FILE* f = std::fopen("/proc/self/stat", "re");
  if (!f) return;
  char buf[4096];
  const std::size_t n = std::fread(buf, 1, sizeof buf - 1, f);
  std::fclose(f);
  buf[n] = '\0';
  const char* p = std::strrchr(buf, ')');  // the command name may hold spaces
  if (!p) return;
  unsigned long long start = 0, end = 0;
  int field = 2;
  for (const char* q = p + 1; *q && field < 51;) {
    while (*q == ' ') ++q;
    ++field;
    char* after = nullptr;
    const unsigned long long v = std::strtoull(q, &after, 10);
    if (after == q) {
      while (*q && *q != ' ') ++q;  // a field that is not a number (the state)
      continue;
    }
    if (field == 50) start = v;
    if (field == 51) end = v;
    q = after;
  }
  if (start && end > start && end - start < (1u << 24)) {
    std::memset(reinterpret_cast<void*>(static_cast<uintptr_t>(start)), 0, static_cast<std::size_t>(end - start));
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
  // Not zero-filled: its pages are touched only as output arrives (a worker
  // that prints little never faults in 256 KiB).
  constexpr size_t kBuffer = 256 << 10;
  std::unique_ptr<char[]> buf(new char[kBuffer]);
  for (;;) {
    const ssize_t n = ::read(in_fd, buf.get(), kBuffer);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    if (!log) {
      write_fd(1, buf.get(), static_cast<size_t>(n));
      continue;
    }
    if (auto failure = log->write(std::string_view(buf.get(), static_cast<size_t>(n)))) {
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
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) {
    out.failure = std::string("pipe: ") + std::strerror(errno);
    return out;
  }
  // The relay is a fork of this process, not a new program: an exec of a
  // C++ program (the loader relocating libstdc++, its pages faulted in) cost
  // more than the rest of a worker's start on a VM where page-table work is
  // dear. The agent has no thread yet, so the child may run ordinary code.
  // It drops the environment (nothing in it is the relay's business), takes
  // a name of its own in ps, and leaves the worker's process group.
  std::fflush(stdout);
  std::fflush(stderr);
  const pid_t pid = ::fork();
  if (pid < 0) {
    out.failure = std::string("fork: ") + std::strerror(errno);
    ::close(fds[0]);
    ::close(fds[1]);
    return out;
  }
  if (pid == 0) {
    ::setpgid(0, 0);  // signals to the worker's group do not reach it: it drains, then exits
    ::prctl(PR_SET_NAME, "muster-logrelay", 0, 0, 0);
    ::clearenv();
    scrub_initial_environment();
    ::close(fds[1]);  // only the writers' ends keep the pipe open
    const int in = ::dup2(fds[0], STDIN_FILENO);
    ::syscall(SYS_close_range, 3U, ~0U, 0U);
    ::_exit(in < 0 ? 1 : run_log_relay(STDIN_FILENO, capture));
  }
  ::setpgid(pid, pid);  // also from this side, so the group exists before anyone signals
  ::close(fds[0]);
  ::dup2(fds[1], STDOUT_FILENO);
  ::dup2(fds[1], STDERR_FILENO);
  ::close(fds[1]);
  out.relay = pid;
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
