#include "workers/agent/agent.h"

#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <thread>

#include <nlohmann/json.hpp>

#include "api/agent_protocol.h"
#include "api/base/atomic_file.h"
#include "api/base/net.h"
#include "api/base/process.h"
#include "api/base/worker_env.h"
#include "api/kernel.h"
#include "workers/agent/leftovers.h"
#include "workers/agent/log_relay.h"
#include "workers/agent/limits.h"
#include "workers/agent/network.h"

namespace muster::workers::agent {

using nlohmann::json;
using namespace std::chrono_literals;

namespace {

// Heartbeats answered 401/403 in a row before the agent gives up.
constexpr int kRefusalsBeforeExit = 3;

volatile sig_atomic_t g_child_pid = 0;
volatile sig_atomic_t g_signal = 0;
// The processes of a release with several (torchrun's nproc_per_node); a
// slot is 0 once its process was reaped.
volatile sig_atomic_t g_group_pids[api::kMaxReleaseProcesses] = {};
volatile sig_atomic_t g_group_size = 0;
// The worker's cgroup v1 limits, which every script process joins between
// fork and exec (null: none to join).
const base::CgroupLimits* g_limits = nullptr;

void forward_signal(int sig) {
  g_signal = sig;
  if (g_child_pid > 0) ::kill(g_child_pid, sig);
  for (sig_atomic_t i = 0; i < g_group_size; ++i) {
    if (g_group_pids[i] > 0) ::kill(g_group_pids[i], sig);
  }
}

void log_line(const std::string& text) {
  std::fprintf(stdout, "[muster-agent] %s\n", text.c_str());
  std::fflush(stdout);
}

class Client {
 public:
  explicit Client(const AgentOptions& o) : options_(o) {
    if (auto e = parse_http_url(o.env.url)) endpoint_ = *e;
    endpoint_.verify = {o.env.tls_fingerprint, o.env.ca_file};
  }
  std::optional<HttpReply> post(const std::string& call, const json& body, std::chrono::milliseconds timeout = 10s,
                                CallError* error = nullptr) {
    return post_json(endpoint_, path(call), options_.env.token, body.dump(), timeout, error);
  }
  // The same over a connection kept open between calls (the heartbeats).
  std::optional<HttpReply> post(HttpConnection& kept, const std::string& call, const json& body,
                                std::chrono::milliseconds timeout) {
    return kept.post(path(call), options_.env.token, body.dump(), timeout);
  }
  const Endpoint& endpoint() const { return endpoint_; }
  // Retries while the daemon is unreachable (e.g. restarting) until `patience`
  // ran out; not a certificate that fails verification (it is logged).
  std::optional<HttpReply> post_retrying(const std::string& call, const json& body,
                                         std::chrono::milliseconds patience) {
    const auto deadline = std::chrono::steady_clock::now() + patience;
    auto backoff = 50ms;
    for (;;) {
      CallError error;
      auto r = post(call, body, 10s, &error);
      if (r && r->status < 500) return r;
      if (!r && error.certificate_refused) {
        log_line(error.message);
        return r;
      }
      if (std::chrono::steady_clock::now() >= deadline) return r;
      std::this_thread::sleep_for(backoff);
      backoff = std::min<std::chrono::milliseconds>(backoff * 2, 1s);
    }
  }

 private:
  std::string path(const std::string& call) const { return "/api/v1/agent/workers/" + options_.env.worker_id + "/" + call; }

  const AgentOptions& options_;
  Endpoint endpoint_;
};

// The script in the agent's own process group (so one signal to the group
// ends both), output onto the agent's (the worker's log), starting clean:
// no blocked or ignored signals, no descriptor of the agent's but 0-2.
pid_t spawn_script(const std::vector<std::string>& command, const std::map<std::string, std::string>& extra_env,
                   const std::string& cwd) {
  base::SpawnOptions o;
  o.argv = command;
  o.env = extra_env;
  o.cwd = cwd;
  o.unset_env = {api::kEnvAgentToken};  // the script has no business with the agent's credentials
  o.stdin_null = false;
  o.new_session = false;
  if (g_limits && !g_limits->v1_dirs().empty()) o.child_setup = [] { return g_limits->join_child(); };
  auto spawned = base::spawn(o);
  if (spawned.failure) {
    log_line(*spawned.failure);
    return -1;
  }
  return spawned.id.pid;
}

int exit_code_of(int status) { return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status); }

std::string describe_exit(int status) {
  if (WIFSIGNALED(status)) return "was killed by signal " + std::to_string(WTERMSIG(status));
  return "exited with code " + std::to_string(exit_code_of(status));
}

// The script once per entry of `processes` (each entry's variables over
// `env`), all in the agent's process group, as torchrun's agent runs a
// node's processes: when one fails, the others are sent SIGTERM (SIGKILL
// after kProcessGrace) and the agent's exit code is the first failure's.
// A process that cannot be started ends those already started (127).
constexpr auto kProcessGrace = 5s;

int run_processes(const std::vector<std::string>& command, const std::map<std::string, std::string>& env,
                  const std::vector<std::map<std::string, std::string>>& processes, const std::string& cwd) {
  const int n = static_cast<int>(processes.size());
  auto label = [&](int i) {
    std::string text = "process " + std::to_string(i) + " of " + std::to_string(n);
    std::string vars;
    for (const auto& [k, v] : processes[static_cast<size_t>(i)]) vars += (vars.empty() ? "" : " ") + k + "=" + v;
    return vars.empty() ? text : text + " (" + vars + ")";
  };
  auto terminate_rest = [&](int sig) {
    for (int i = 0; i < n; ++i) {
      if (g_group_pids[i] > 0) ::kill(g_group_pids[i], sig);
    }
  };
  int running = 0;
  int first_failure = -1;  // exit code of the first process that failed
  for (int i = 0; i < n; ++i) {
    auto process_env = env;
    for (const auto& [k, v] : processes[static_cast<size_t>(i)]) process_env[k] = v;
    const pid_t pid = spawn_script(command, process_env, cwd);
    if (pid <= 0) {
      log_line("could not start " + label(i) + "; ending the " + std::to_string(running) + " started");
      first_failure = 127;
      terminate_rest(SIGTERM);
      break;
    }
    g_group_pids[i] = pid;
    g_group_size = i + 1;
    ++running;
    if (g_signal) ::kill(pid, g_signal);
  }
  auto deadline = std::chrono::steady_clock::time_point::max();
  while (running > 0) {
    int status = 0;
    // Blocking until a failure; then polling, so the grace can end in SIGKILL.
    const pid_t pid = ::waitpid(-1, &status, first_failure < 0 ? 0 : WNOHANG);
    if (pid < 0) {
      if (errno == EINTR) continue;
      break;  // ECHILD: nothing left to wait for
    }
    if (pid == 0) {
      if (std::chrono::steady_clock::now() >= deadline) {
        log_line("processes still running " + std::to_string(std::chrono::seconds(kProcessGrace).count()) +
                 " s after SIGTERM; sending SIGKILL");
        terminate_rest(SIGKILL);
        deadline = std::chrono::steady_clock::time_point::max();
      }
      std::this_thread::sleep_for(20ms);
      continue;
    }
    int index = -1;
    for (int i = 0; i < n; ++i) {
      if (g_group_pids[i] == pid) index = i;
    }
    if (index < 0) continue;  // not one of ours (a grandchild re-parented to us)
    g_group_pids[index] = 0;
    --running;
    const int code = exit_code_of(status);
    if (code != 0 && first_failure < 0) {
      first_failure = code;
      log_line(label(index) + " " + describe_exit(status) +
               (running > 0 ? "; ending the other " + std::to_string(running) : ""));
      terminate_rest(SIGTERM);
      deadline = std::chrono::steady_clock::now() + kProcessGrace;
    } else if (code != 0) {
      log_line(label(index) + " " + describe_exit(status));
    }
  }
  g_group_size = 0;
  return first_failure < 0 ? 0 : first_failure;
}

}  // namespace

ScriptDirectory script_directory(const std::string& project_dir, const std::string& worker_dir) {
  if (project_dir.empty()) return {worker_dir, ""};
  std::error_code ec;
  if (std::filesystem::is_directory(project_dir, ec)) return {project_dir, ""};
  return {worker_dir, "the project directory " + project_dir + " is not on this host (" +
                          (ec ? ec.message() : std::string("not a directory")) +
                          "); the script starts in the worker's directory " + worker_dir};
}

std::vector<std::string> script_command(const AgentOptions& o) {
  api::KernelCommandOptions k;
  k.kernel = o.command.kernel;
  k.script = o.command.script;
  k.code = o.command.code;
  k.args = o.command.args;
  k.python = o.command.python;
  return api::script_command(k);
}

int run_agent(const AgentOptions& o) {
  Client client(o);
  auto endpoint = parse_http_url(o.env.url);
  if (!endpoint || o.env.worker_id.empty() || o.env.token.empty()) {
    log_line(std::string(base::kEnvUrl) + " (http(s)://host:port), " + base::kEnvWorkerId + " and " +
             base::kEnvAgentToken + " are required");
    return 2;
  }
  // 0. Before anything forks: a child subreaper, in the worker's cgroup.
  Leftovers leftovers;
  leftovers.spare(o.log_relay);
  log_line(leftovers.adopt_process(o.env.cgroup, o.env.worker_id));
  // The limits too, so that registering can say which are enforced.
  AgentLimits limits = set_up_limits(o.env, leftovers.cgroup());
  g_limits = &limits.cgroup;
  log_line(describe_limits(o.env, limits.report));
  // 1. The IP that routes to the daemon, and maybe a reserved port.
  const std::string master = o.env.master_ip.empty() ? endpoint->host : o.env.master_ip;
  const auto local = base::local_address_towards(master, endpoint->port);
  if (local.failure) {
    log_line("cannot find the address that reaches the daemon: " + *local.failure);
    return 2;
  }
  const std::string& ip = local.address;
  std::optional<ReservedPort> port = o.env.reserve_port ? ReservedPort::reserve(ip) : std::nullopt;
  if (o.env.reserve_port) {
    if (!port) log_line("could not reserve a port on " + ip + "; registering without one");
  }
  // 2. Register.
  api::AgentRegistration registration{ip, std::nullopt, limits.report};
  if (port) registration.port = port->port();
  auto reply = client.post_retrying("register", api::to_json(registration), 30s);
  if (!reply || reply->status != 200) {
    log_line("register failed (" + (reply ? std::to_string(reply->status) + " " + reply->body : "daemon unreachable") +
             "); not running the script");
    leftovers.release();
    return 3;
  }
  const auto registered = api::registered_from_json(json::parse(reply->body, nullptr, false));
  if (!registered) {
    log_line("the daemon's register reply is malformed (" + registered.status().message() + "): " + reply->body);
    leftovers.release();
    return 3;
  }
  const bool hold = registered->hold;
  // The daemon's heartbeat budget may stretch the interval (api/agent_protocol.h).
  auto heartbeat_every = registered->heartbeat.value_or(o.env.heartbeat);
  // The backend started the agent in the worker's directory: the script's
  // scratch space and where released files go (absolute paths, since the
  // script itself starts in the project).
  std::error_code cwd_error;
  const std::filesystem::path worker_dir = std::filesystem::current_path(cwd_error);
  std::map<std::string, std::string> env = {{base::kEnvIpAddress, ip},
                                            {"CDSW_IP_ADDRESS", ip},
                                            {"PYTHONUNBUFFERED", "1"},
                                            {base::kEnvWorkerDir, worker_dir.string()}};
  if (port) env[base::kEnvPort] = std::to_string(port->port());

  // 5 (early). Heartbeats run from registration on, also while held.
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  std::atomic<bool> stopped_by_daemon{false};
  // Set just before the exit is reported: from then on the daemon may answer
  // a heartbeat still in flight with 404/409 (the worker has ended), which
  // is the exit's own doing, not a stop.
  std::atomic<bool> exit_reporting{false};
  const auto orphan_timeout = o.env.orphan_timeout.value_or(kDefaultOrphanTimeout);
  std::thread heartbeat([&] {
    HttpConnection kept(client.endpoint());
    std::unique_lock<std::mutex> lock(mu);
    auto last_answer = std::chrono::steady_clock::now();
    int refused = 0;  // 401/403 in a row
    while (!cv.wait_for(lock, heartbeat_every, [&] { return done; })) {
      lock.unlock();
      auto r = client.post(kept, "heartbeat", json::object(), 5s);
      lock.lock();
      if (exit_reporting) continue;
      if (r && r->status == 200) {
        // {} from an older daemon keeps the interval; a malformed reply too.
        if (auto told = api::heartbeat_reply_from_json(json::parse(r->body, nullptr, false)); told && told->heartbeat) {
          heartbeat_every = *told->heartbeat;
        }
      }
      const bool denied = r && (r->status == 401 || r->status == 403);
      refused = denied ? refused + 1 : 0;
      if (r && r->status < 500 && !denied) last_answer = std::chrono::steady_clock::now();
      const bool orphaned = std::chrono::steady_clock::now() - last_answer > orphan_timeout;
      // A daemon that keeps refusing the token (restarted with another state
      // dir, or the worker was deleted) will never take this worker back.
      const bool disowned = refused >= kRefusalsBeforeExit;
      if ((r && (r->status == 404 || r->status == 409)) || orphaned || disowned) {
        stopped_by_daemon = true;
        if (disowned) {
          log_line("the daemon at " + o.env.url + " refused this worker's token " + std::to_string(refused) +
                   " times in a row (" + std::to_string(r->status) + " " + r->body +
                   "); it no longer knows this worker (restarted with another state dir?); stopping the script");
        } else {
          log_line(orphaned ? std::string("the daemon has not answered for too long; stopping the script")
                            : "the daemon ended this worker (" + r->body + "); stopping the script");
        }
        if (g_child_pid > 0 || g_group_size > 0) {
          ::kill(-::getpgrp(), SIGTERM);
        } else {
          ::kill(::getpid(), SIGTERM);
        }
        return;
      }
    }
  });
  auto finish = [&](int code) {
    {
      std::lock_guard<std::mutex> lock(mu);
      done = true;
    }
    cv.notify_all();
    heartbeat.join();
    leftovers.release();
    if (!limits.cgroup.remove()) log_line("could not remove the worker's cgroup v1 directories");
    return code;
  };

  struct sigaction sa {};
  sa.sa_handler = forward_signal;
  sigemptyset(&sa.sa_mask);
  ::sigaction(SIGTERM, &sa, nullptr);
  ::sigaction(SIGINT, &sa, nullptr);

  // 3. Held: wait for the release.
  std::vector<std::map<std::string, std::string>> processes;
  while (hold && !g_signal && !stopped_by_daemon) {
    auto r = client.post("wait-release", json::object(), 40s);
    if (!r || r->status == 204 || r->status >= 500) {
      if (!r) std::this_thread::sleep_for(200ms);
      continue;
    }
    if (r->status != 200) {
      log_line("wait-release failed: " + std::to_string(r->status) + " " + r->body);
      return finish(3);
    }
    const auto release = api::release_from_json(json::parse(r->body, nullptr, false));
    if (!release) {
      log_line("the daemon's release is malformed (" + release.status().message() + "); not running the script");
      return finish(3);
    }
    for (const auto& [name, content] : release->files) {
      if (auto err = base::write_file_atomically(worker_dir / name, content)) log_line(*err);
    }
    for (const auto& [k, v] : release->env) env[k] = v;
    processes = release->processes;
    if (!release->interface_env.empty()) {
      const auto name = interface_with_address(ip);
      const auto inherited = api::process_env();
      for (const auto& var : release->interface_env) {
        if (env.count(var) || inherited.count(var)) continue;  // the caller's choice stands
        if (name) env[var] = *name;
      }
      if (!name) log_line("no interface holds this worker's address " + ip + "; " + release->interface_env.front() +
                          " and the like are left unset");
    }
    break;
  }
  if (g_signal || stopped_by_daemon) return finish(128 + (g_signal ? g_signal : SIGTERM));

  // 4. The script, each of its processes joining the limits' cgroups (step 0).
  if (port) port->release();
  const auto command = script_command(o);
  const ScriptDirectory cwd = script_directory(o.env.project_dir, worker_dir.string());
  if (!cwd.note.empty()) log_line(cwd.note);
  const pid_t child = processes.empty() ? spawn_script(command, env, cwd.path) : 0;
  int exit_code = processes.empty() ? 127 : run_processes(command, env, processes, cwd.path);
  if (child > 0) {
    g_child_pid = child;
    if (g_signal) ::kill(child, g_signal);
    // Any child may end here: as a subreaper the agent also collects the
    // orphans the script left, until the script itself ends.
    int status = 0;
    for (;;) {
      const pid_t ended = ::waitpid(-1, &status, 0);
      if (ended == child || (ended < 0 && errno == ECHILD)) break;
    }
    exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    g_child_pid = 0;
  }
  // 5b. What the script left running ends with it (background children,
  // setsid or double-forked escapees).
  if (const size_t ended = leftovers.end(o.env.stop_grace)) {
    log_line("ended " + std::to_string(ended) + " process(es) the script left running");
  }
  // 5c. The log relay writes the script's last lines before the exit is
  // reported, so whoever awaited the worker reads its whole log.
  (void)finish_log_capture(o.log_relay, std::chrono::seconds(2));
  // 6. Report the exit. Told to stop (SIGTERM from the daemon): once and
  // briefly, as the daemon has already recorded the stop and a busy daemon
  // must not keep a stopped agent alive.
  if (!stopped_by_daemon) {
    exit_reporting = true;
    const bool out_of_memory = exit_code != 0 && limits.out_of_memory();
    if (out_of_memory) log_line("the kernel's OOM killer ended a process of this worker (memory limit reached)");
    const auto body = api::to_json(api::AgentExit{exit_code, out_of_memory});
    auto r = g_signal ? client.post("exit", body, 2s) : client.post_retrying("exit", body, 60s);
    if (!r && !g_signal) log_line("could not report the exit code to the daemon");
  }
  finish(exit_code);
  if (stopped_by_daemon) ::kill(-::getpgrp(), SIGKILL);  // leftovers of the script's tree, and us
  return exit_code;
}

}  // namespace muster::workers::agent
