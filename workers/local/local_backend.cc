#include "muster/workers/local/local_backend.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>

extern char** environ;

namespace muster::workers::local {

namespace {

int decode_wait_status(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return -1;
}

// Owns the posix_spawn attribute objects.
struct SpawnSetup {
  posix_spawn_file_actions_t actions;
  posix_spawnattr_t attr;
  SpawnSetup() {
    posix_spawn_file_actions_init(&actions);
    posix_spawnattr_init(&attr);
  }
  ~SpawnSetup() {
    posix_spawn_file_actions_destroy(&actions);
    posix_spawnattr_destroy(&attr);
  }
};

// Whether any process of group `pgid` is alive (zombies do not count: an
// orphaned grandchild may wait for a PID 1 that is slow to reap it).
bool group_has_live_members(pid_t pgid) {
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/proc", ec)) {
    const std::string name = entry.path().filename().string();
    if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream in(entry.path() / "stat");
    std::string stat;
    if (!std::getline(in, stat)) continue;
    const auto close = stat.rfind(')');
    if (close == std::string::npos) continue;
    char state = 0;
    int ppid = 0, pgrp = 0;
    if (std::sscanf(stat.c_str() + close + 1, " %c %d %d", &state, &ppid, &pgrp) != 3) continue;
    if (pgrp == pgid && state != 'Z' && state != 'X') return true;
  }
  return false;
}

}  // namespace

LocalBackend::LocalBackend(LocalBackendOptions options) : options_(options) {
  reaper_ = std::thread([this] { reaper_loop(); });
}

LocalBackend::~LocalBackend() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    closing_ = true;
  }
  reaper_cv_.notify_all();
  reaper_.join();
}

void LocalBackend::reaper_loop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!reaper_cv_.wait_for(lock, std::chrono::milliseconds(200), [&] { return closing_; })) {
    for (auto& [id, child] : children_) reap_locked(child);
  }
}

api::Result<pid_t> LocalBackend::spawn(const LaunchSpec& spec) {
  if (spec.agent_argv.empty()) return api::invalid_argument("worker " + spec.worker_id + ": empty agent command");
  SpawnSetup s;
  posix_spawn_file_actions_addopen(&s.actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&s.actions, 1, spec.log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  posix_spawn_file_actions_adddup2(&s.actions, 1, 2);
  // The daemon's sockets (its listener above all) must not leak into the
  // agent: an agent outliving a killed daemon would keep its port bound.
  posix_spawn_file_actions_addclosefrom_np(&s.actions, 3);
  if (!spec.working_dir.empty()) posix_spawn_file_actions_addchdir_np(&s.actions, spec.working_dir.c_str());
  sigset_t none, defaults;
  sigemptyset(&none);
  sigemptyset(&defaults);
  for (int sig : {SIGTERM, SIGINT, SIGHUP, SIGPIPE, SIGCHLD}) sigaddset(&defaults, sig);
  posix_spawnattr_setsigmask(&s.attr, &none);
  posix_spawnattr_setsigdefault(&s.attr, &defaults);
  posix_spawnattr_setflags(&s.attr, POSIX_SPAWN_SETSID | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);

  std::map<std::string, std::string> env;
  for (char** e = environ; *e; ++e) {
    const char* eq = std::strchr(*e, '=');
    if (eq) env[std::string(*e, static_cast<size_t>(eq - *e))] = eq + 1;
  }
  for (const auto& [k, v] : spec.env) env[k] = v;
  std::vector<std::string> env_strings;
  for (const auto& [k, v] : env) env_strings.push_back(k + "=" + v);
  std::vector<char*> envp;
  for (auto& e : env_strings) envp.push_back(e.data());
  envp.push_back(nullptr);
  std::vector<std::string> args = spec.agent_argv;
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);

  pid_t pid = -1;
  const int rc = posix_spawn(&pid, argv[0], &s.actions, &s.attr, argv.data(), envp.data());
  if (rc != 0) {
    return api::internal_error("worker " + spec.worker_id + ": cannot start " + spec.agent_argv[0] + ": " +
                               std::strerror(rc));
  }
  return pid;
}

api::Status LocalBackend::launch(const std::vector<LaunchSpec>& specs) {
  std::vector<std::string> started;
  for (const auto& spec : specs) {
    auto pid = spawn(spec);
    if (!pid) {
      for (const auto& id : started) (void)stop(id, std::chrono::milliseconds(0));
      return pid.status();
    }
    std::lock_guard<std::mutex> lock(mu_);
    children_[spec.worker_id] = Child{pid.value(), std::nullopt};
    started.push_back(spec.worker_id);
  }
  return api::Status::ok();
}

void LocalBackend::reap_locked(Child& child) {
  if (child.exit_code) return;
  int status = 0;
  const pid_t r = ::waitpid(child.pid, &status, WNOHANG);
  if (r == child.pid) {
    child.exit_code = decode_wait_status(status);
  } else if (r < 0 && errno == ECHILD) {
    child.exit_code = -1;  // reaped elsewhere; treat as gone
  }
}

bool LocalBackend::group_alive(const std::string& worker_id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = children_.find(worker_id);
  if (it == children_.end()) return false;
  reap_locked(it->second);
  const pid_t pgid = it->second.pid;
  if (!it->second.exit_code) return true;
  // The group outlives its leader while any descendant still runs.
  return ::kill(-pgid, 0) == 0 && group_has_live_members(pgid);
}

api::Status LocalBackend::stop(const std::string& worker_id, std::chrono::milliseconds grace) {
  pid_t pgid;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = children_.find(worker_id);
    if (it == children_.end()) return api::Status::ok();
    pgid = it->second.pid;
  }
  using clock = std::chrono::steady_clock;
  auto wait_gone = [&](clock::duration limit) {
    const auto deadline = clock::now() + limit;
    while (group_alive(worker_id)) {
      if (clock::now() >= deadline) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return true;
  };
  ::kill(-pgid, SIGTERM);
  if (wait_gone(grace)) return api::Status::ok();
  ::kill(-pgid, SIGKILL);
  if (wait_gone(std::chrono::seconds(2))) return api::Status::ok();
  return api::internal_error("worker " + worker_id + ": process group " + std::to_string(pgid) +
                             " still exists after SIGKILL");
}

ProcessStatus LocalBackend::poll(const std::string& worker_id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = children_.find(worker_id);
  if (it == children_.end()) return {ProcessState::kUnknown, std::nullopt};
  reap_locked(it->second);
  if (it->second.exit_code) return {ProcessState::kExited, it->second.exit_code};
  return {ProcessState::kRunning, std::nullopt};
}

void LocalBackend::shutdown() {
  if (!options_.stop_on_shutdown) return;
  std::vector<std::string> ids;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [id, child] : children_) ids.push_back(id);
  }
  for (const auto& id : ids) (void)stop(id, std::chrono::seconds(2));
}

}  // namespace muster::workers::local
