#include "api/base/process.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>

extern char** environ;

namespace muster::base {
namespace fs = std::filesystem;

std::string ProcessId::to_string() const { return std::to_string(pid) + ":" + std::to_string(start_time); }

std::optional<ProcessId> ProcessId::parse(const std::string& text) {
  long long pid = 0;
  unsigned long long start = 0;
  int used = 0;
  if (std::sscanf(text.c_str(), "%lld:%llu%n", &pid, &start, &used) != 2 ||
      static_cast<size_t>(used) != text.size() || pid <= 0 || pid > INT_MAX || start == 0) {
    return std::nullopt;
  }
  return ProcessId{static_cast<pid_t>(pid), start};
}

std::optional<ProcStat> read_proc_stat(pid_t pid) {
  if (pid <= 0) return std::nullopt;
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string text;
  if (!std::getline(in, text)) return std::nullopt;
  // "pid (comm) state ppid pgrp session ..."; comm may hold spaces and ')'.
  const auto close = text.rfind(')');
  if (close == std::string::npos || close + 2 > text.size()) return std::nullopt;
  std::istringstream rest(text.substr(close + 2));
  ProcStat s;
  s.pid = pid;
  // Fields 3..22: state ppid pgrp session tty_nr tpgid flags minflt cminflt
  // majflt cmajflt utime stime cutime cstime priority nice num_threads
  // itrealvalue starttime.
  long long skip = 0;
  rest >> s.state >> s.ppid >> s.pgrp >> s.session;
  for (int i = 0; i < 15; ++i) rest >> skip;
  rest >> s.start_time;
  if (!rest) return std::nullopt;
  return s;
}

std::vector<ProcStat> list_processes() {
  std::vector<ProcStat> out;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator("/proc", ec)) {
    const std::string name = entry.path().filename().string();
    if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;
    if (auto s = read_proc_stat(static_cast<pid_t>(std::stol(name)))) out.push_back(*s);
  }
  return out;
}

std::optional<ProcessId> identify(pid_t pid) {
  auto s = read_proc_stat(pid);
  if (!s) return std::nullopt;
  return s->id();
}

bool alive(const ProcessId& id) {
  auto s = read_proc_stat(id.pid);
  return s && s->start_time == id.start_time && s->live();
}

bool group_alive(pid_t pgid) {
  if (pgid <= 1) return false;
  for (const auto& p : list_processes()) {
    if (p.pgrp == pgid && p.live()) return true;
  }
  return false;
}

std::vector<ProcessId> descendants(const ProcessId& root) {
  if (!alive(root)) return {};
  const auto table = list_processes();
  std::vector<ProcessId> out;
  std::set<pid_t> seen = {root.pid};
  std::vector<pid_t> frontier = {root.pid};
  while (!frontier.empty()) {
    const pid_t parent = frontier.back();
    frontier.pop_back();
    for (const auto& p : table) {
      if (p.ppid == parent && p.live() && seen.insert(p.pid).second) {
        out.push_back(p.id());
        frontier.push_back(p.pid);
      }
    }
  }
  return out;
}

bool signal_process(const ProcessId& id, int sig) {
  if (id.pid <= 1 || !alive(id)) return false;
  return ::kill(id.pid, sig) == 0;
}

bool signal_group(const ProcessId& leader, int sig) {
  if (leader.pid <= 1) return false;
  auto now = read_proc_stat(leader.pid);
  // Another process holds the leader's pid: the original group is empty.
  if (now && now->start_time != leader.start_time) return false;
  return ::kill(-leader.pid, sig) == 0;
}

std::vector<ProcessId> session_members(const ProcessId& leader) {
  std::vector<ProcessId> out;
  if (leader.pid <= 1) return out;
  auto now = read_proc_stat(leader.pid);
  if (now && now->start_time != leader.start_time) return out;
  for (const auto& p : list_processes()) {
    if (p.session == leader.pid && p.live()) out.push_back(p.id());
  }
  return out;
}

int signal_session(const ProcessId& leader, int sig) {
  int n = 0;
  for (const auto& p : session_members(leader)) n += signal_process(p, sig) ? 1 : 0;
  return n;
}

int exit_code_of(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return -1;
}

std::optional<int> try_reap(pid_t pid) {
  int status = 0;
  const pid_t r = ::waitpid(pid, &status, WNOHANG);
  if (r == pid) return exit_code_of(status);
  if (r < 0 && errno == ECHILD) return -1;
  return std::nullopt;
}

int wait_exit(pid_t pid) {
  int status = 0;
  for (;;) {
    const pid_t r = ::waitpid(pid, &status, 0);
    if (r == pid) return exit_code_of(status);
    if (r < 0 && errno != EINTR) return -1;
  }
}

namespace {

std::vector<std::string> environment_of(const SpawnOptions& o) {
  std::map<std::string, std::string> env;
  if (o.inherit_env) {
    for (char** e = environ; *e; ++e) {
      const char* eq = std::strchr(*e, '=');
      if (eq) env[std::string(*e, static_cast<size_t>(eq - *e))] = eq + 1;
    }
    for (const auto& name : o.unset_env) env.erase(name);
  }
  for (const auto& [k, v] : o.env) env[k] = v;
  std::vector<std::string> out;
  for (const auto& [k, v] : env) out.push_back(k + "=" + v);
  return out;
}

std::vector<char*> c_strings(std::vector<std::string>& strings) {
  std::vector<char*> out;
  for (auto& s : strings) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

// argv[0] as exec will run it: a path as given, a name found on PATH.
std::optional<std::string> resolve(const std::string& program) {
  if (program.find('/') != std::string::npos) return program;
  const char* path = std::getenv("PATH");
  std::istringstream dirs(path ? path : "/usr/local/bin:/usr/bin:/bin");
  std::string dir;
  while (std::getline(dirs, dir, ':')) {
    const std::string candidate = (dir.empty() ? std::string(".") : dir) + "/" + program;
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return std::nullopt;
}

// Every signal but those that cannot be caught: reset to the default.
sigset_t all_signals() {
  sigset_t set;
  sigfillset(&set);
  sigdelset(&set, SIGKILL);
  sigdelset(&set, SIGSTOP);
  return set;
}

// The fork + exec path: only async-signal-safe calls after fork().
Spawned fork_exec(const SpawnOptions& o, const std::string& exe, std::vector<std::string> args,
                  std::vector<std::string> env) {
  std::vector<char*> argv = c_strings(args);
  std::vector<char*> envp = c_strings(env);
  int out_fd = o.output_fd;
  int opened = -1;
  if (out_fd < 0 && !o.output.empty()) {
    opened = out_fd = ::open(o.output.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (opened < 0) return {{}, "cannot open " + o.output.string() + ": " + std::strerror(errno)};
  }
  const int devnull = o.input_fd < 0 && o.stdin_null ? ::open("/dev/null", O_RDONLY | O_CLOEXEC) : -1;
  const int in_fd = o.input_fd;
  const std::string cwd = o.cwd.string();
  const int err_fd = o.error_fd;
  const bool new_session = o.new_session, new_group = o.new_process_group;
  const std::function<int()>& setup = o.child_setup;
  const pid_t pid = ::fork();
  if (pid == 0) {
    if (new_session) {
      ::setsid();
    } else if (new_group) {
      ::setpgid(0, 0);
    }
    if (setup) {
      if (int code = setup(); code != 0) ::_exit(code);
    }
    if (devnull >= 0) ::dup2(devnull, 0);
    if (in_fd >= 0) ::dup2(in_fd, 0);
    if (out_fd >= 0) {
      ::dup2(out_fd, 1);
      ::dup2(out_fd, 2);
    }
    if (err_fd >= 0) ::dup2(err_fd, 2);
    if (!cwd.empty() && ::chdir(cwd.c_str()) != 0) ::_exit(126);
    struct sigaction dfl {};
    dfl.sa_handler = SIG_DFL;
    for (int sig = 1; sig < NSIG; ++sig) ::sigaction(sig, &dfl, nullptr);
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    ::syscall(SYS_close_range, 3U, ~0U, 0U);
    ::execve(exe.c_str(), argv.data(), envp.data());
    ::_exit(127);
  }
  const int saved = errno;
  if (opened >= 0) ::close(opened);
  if (devnull >= 0) ::close(devnull);
  if (pid < 0) return {{}, "cannot fork for " + args[0] + ": " + std::strerror(saved)};
  // A new group also from this side, so it exists before we might signal it
  // (not for a new session: a group leader cannot call setsid()).
  if (new_group && !new_session) ::setpgid(pid, pid);
  auto id = identify(pid);
  return {id.value_or(ProcessId{pid, 0}), std::nullopt};
}

}  // namespace

std::optional<std::string> find_on_path(const std::string& program) { return resolve(program); }

Spawned spawn(const SpawnOptions& o) {
  if (o.argv.empty() || o.argv[0].empty()) return {{}, "cannot start a process: empty command line"};
  const auto exe = resolve(o.argv[0]);
  if (!exe) return {{}, "cannot start " + o.argv[0] + ": not found on PATH"};
  std::vector<std::string> args = o.argv;
  std::vector<std::string> env = environment_of(o);
  if (o.child_setup) return fork_exec(o, *exe, std::move(args), std::move(env));

  posix_spawn_file_actions_t actions;
  posix_spawnattr_t attr;
  posix_spawn_file_actions_init(&actions);
  posix_spawnattr_init(&attr);
  struct Cleanup {
    posix_spawn_file_actions_t* a;
    posix_spawnattr_t* t;
    ~Cleanup() {
      posix_spawn_file_actions_destroy(a);
      posix_spawnattr_destroy(t);
    }
  } cleanup{&actions, &attr};

  if (o.input_fd >= 0) {
    posix_spawn_file_actions_adddup2(&actions, o.input_fd, 0);
  } else if (o.stdin_null) {
    posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  }
  if (o.output_fd >= 0) {
    posix_spawn_file_actions_adddup2(&actions, o.output_fd, 1);
    posix_spawn_file_actions_adddup2(&actions, o.output_fd, 2);
  } else if (!o.output.empty()) {
    posix_spawn_file_actions_addopen(&actions, 1, o.output.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    posix_spawn_file_actions_adddup2(&actions, 1, 2);
  }
  if (o.error_fd >= 0) posix_spawn_file_actions_adddup2(&actions, o.error_fd, 2);
  posix_spawn_file_actions_addclosefrom_np(&actions, 3);
  if (!o.cwd.empty()) posix_spawn_file_actions_addchdir_np(&actions, o.cwd.c_str());
  sigset_t none, defaults = all_signals();
  sigemptyset(&none);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setsigdefault(&attr, &defaults);
  short flags = POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF;
  if (o.new_session) {
    flags |= POSIX_SPAWN_SETSID;
  } else if (o.new_process_group) {
    flags |= POSIX_SPAWN_SETPGROUP;
    posix_spawnattr_setpgroup(&attr, 0);
  }
  posix_spawnattr_setflags(&attr, flags);

  std::vector<char*> argv = c_strings(args);
  std::vector<char*> envp = c_strings(env);
  pid_t pid = -1;
  const int rc = ::posix_spawn(&pid, exe->c_str(), &actions, &attr, argv.data(), envp.data());
  if (rc != 0) return {{}, "cannot start " + o.argv[0] + ": " + std::strerror(rc)};
  auto id = identify(pid);
  return {id.value_or(ProcessId{pid, 0}), std::nullopt};
}

}  // namespace muster::base
