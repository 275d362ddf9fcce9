// musterd's program: the flags become DaemonOptions; service/daemon.h says
// what is built in which order and owns it all; this file blocks the
// signals the daemon waits for (before any thread starts, so every thread
// inherits the mask) and reports a start that failed.
#include <signal.h>
#include <sys/resource.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include "api/agent_protocol.h"
#include "api/base/rotating_log.h"
#include "service/daemon.h"
#include "service/musterd_main.h"

namespace fs = std::filesystem;
using namespace muster;

namespace {

std::chrono::milliseconds seconds(double s) { return std::chrono::milliseconds(static_cast<long>(s * 1000)); }

}  // namespace

namespace {

// Every running worker holds files open here: its agent's heartbeat
// connection (kept open) and, on the local backend, a pidfd. A soft limit
// of 1,024 (Debian's default) would end at a few hundred workers, so the
// daemon takes the hard limit; its agents put the soft one back
// (api::kEnvFileLimit).
void raise_file_limit() {
  rlimit files{};
  if (::getrlimit(RLIMIT_NOFILE, &files) != 0 || files.rlim_cur >= files.rlim_max) return;
  const rlim_t was = files.rlim_cur;
  files.rlim_cur = files.rlim_max;
  if (::setrlimit(RLIMIT_NOFILE, &files) != 0) {
    spdlog::warn("could not raise the open-files limit from {} to {}: {}", was, files.rlim_max, std::strerror(errno));
    return;
  }
  ::setenv(api::kEnvFileLimit, std::to_string(was).c_str(), 1);
}

}  // namespace

int muster::service::musterd_main(int argc, char** argv) {
  CLI::App app{"musterd: launches workers for distributed training and serves the muster REST API"};
  app.option_defaults()->always_capture_default();  // --help shows every default
  service::DaemonOptions o;
  std::string project_dir = fs::current_path().string();
  const char* home = std::getenv("HOME");
  std::string state_dir = std::string(home ? home : "/tmp") + "/.muster";
  o.default_state_dir = state_dir;
  std::vector<std::string> backend_opts;
  double startup_timeout = 60, heartbeat_timeout = 10, heartbeat_interval = 2, stop_grace = 3, await_settle = 1;
  double read_timeout = 10, idle_timeout = 60;
  double retain_finished = 7 * 24 * 3600;
  std::string agent_path, log_level = "info";
  auto& http = o.http;  // limits: docs/ARCHITECTURE.md, "Limits"
  app.add_option("--listen", o.listen, "HOST:PORT to listen on (port 0: any free port)");
  app.add_option("--project-dir", project_dir, "scripts are resolved inside this directory");
  app.add_option("--state-dir", state_dir, "token, state database, worker logs (one musterd per directory)");
  app.add_option("--backend", o.backend, "where workers run: local, container, ssh, slurm, kubernetes");
  app.add_option("--backend-opt", backend_opts, "backend setting key=value (repeatable)");
  app.add_option("--max-workers", o.max_workers, "largest n of one launch")->check(CLI::Range(1, 100000));
  app.add_option("--startup-timeout", startup_timeout, "seconds for an agent to register before timedout");
  app.add_option("--heartbeat-timeout", heartbeat_timeout, "seconds without heartbeat before lost");
  app.add_option("--heartbeat-interval", heartbeat_interval, "seconds between agent heartbeats");
  app.add_option("--heartbeat-rate", o.heartbeat_rate,
                 "heartbeats a second budgeted for the whole fleet: beyond rate x interval running workers, every "
                 "agent's interval (and the loss timeout with it) stretches to workers / rate (0: never)")
      ->check(CLI::Range(0.0, 1e6));
  app.add_option("--stop-grace", stop_grace, "seconds between SIGTERM and SIGKILL when stopping");
  app.add_option("--await-settle", await_settle,
                 "seconds a script must have run before await (wait_for_completion=false) counts it as running")
      ->check(CLI::Range(0.0, 60.0));
  app.add_option("--max-live-workers", o.retention.max_live, "workers that have not finished, at most (409 above)")
      ->check(CLI::Range(1, 1'000'000));
  app.add_option("--max-finished-workers", o.retention.max_finished,
                 "finished workers (outside clusters) kept; the oldest are forgotten beyond it")
      ->check(CLI::Range(0, 10'000'000));
  app.add_option("--max-finished-clusters", o.max_finished_clusters,
                 "finished clusters kept, with their workers; the oldest are forgotten beyond it")
      ->check(CLI::Range(0, 1'000'000));
  app.add_option("--retain-finished", retain_finished,
                 "seconds a finished worker or cluster is kept (default 604800: a week)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--overcommit", o.overcommit,
                 "true: a launch that takes this host's CPUs or memory (local, container backends) past what it "
                 "has runs, shared, with a warning naming the totals; false: such workers wait in scheduling "
                 "(\"waiting for 2 CPUs: 4 of 2 requested\") until others end, a cluster whole")
      ->check(CLI::IsMember({"true", "false"}))
      ->default_str("true");
  app.add_flag("--adopt-orphaned-workers", o.restore.adopt_orphans,
               "start although worker directories have no record in the state database, listing them as lost");
  app.add_option("--max-body-bytes", http.max_body_bytes, "largest request body accepted (413 above)");
  app.add_option("--http-max-drain-bytes", http.max_drain_bytes,
                 "bytes of a refused body read and discarded so that the client reads the 413");
  app.add_option("--http-max-header-bytes", http.max_header_bytes, "largest request line + headers (431 above)");
  app.add_option("--http-max-connections", http.max_connections, "open connections (503 above)")
      ->check(CLI::Range(1, 1 << 20));
  app.add_option("--http-max-kept-connections", http.max_kept_connections,
                 "connections kept open between requests; above it a response closes its connection "
                 "(default: --http-max-connections less 1/16 of it)")
      ->check(CLI::Range(0, 1 << 20));
  app.add_option("--http-read-timeout", read_timeout, "seconds a client has to send one whole request")
      ->check(CLI::PositiveNumber);
  app.add_option("--http-idle-timeout", idle_timeout, "seconds a keep-alive connection may idle")
      ->check(CLI::PositiveNumber);
  app.add_option("--http-io-threads", http.io_threads, "threads serving sockets")->check(CLI::Range(1, 64));
  app.add_option("--http-handler-threads", http.handler_threads, "threads running user request handlers")
      ->check(CLI::Range(1, 1024));
  app.add_option("--http-agent-threads", http.agent_handler_threads,
                 "threads running agent requests (register, heartbeat, exit), apart from users'")
      ->check(CLI::Range(1, 1024));
  app.add_option("--tls-cert", o.tls_cert,
                 "PEM certificate (chain) to serve HTTPS with; default beyond loopback: a self-signed one made in "
                 "<state-dir>/tls and kept (its SHA-256 in musterd.json)");
  app.add_option("--tls-key", o.tls_key, "PEM private key of --tls-cert");
  app.add_flag("--insecure-http", o.insecure_http,
               "serve plain HTTP on a non-loopback --listen address (tokens cross the network in the clear)");
  app.add_option("--agent-path", agent_path, "the agent program (default: muster-agent beside musterd)");
  app.add_option("--dashboard-dir", o.dashboard_dir, "the dashboard's files (default: installed beside musterd)");
  app.add_option("--max-event-streams", o.max_event_streams, "open dashboard event streams (503 above)")
      ->check(CLI::Range(1, 4096));
  app.add_option("--log-level", log_level, "trace, debug, info, warn, error");
  app.add_option("--gpus", o.gpus,
                 "GPU device indices of this host workers may reserve, e.g. 0,1 (\"\": none; "
                 "default: what nvidia-smi -L lists, none without it)");
  app.add_option("--max-log-followers", o.max_log_followers, "streams of followed logs at once (503 above)")
      ->check(CLI::Range(1, 100000));
  app.add_option("--worker-log-max-size", o.worker_log.max_bytes,
                 "size cap of each worker's and cluster launcher's log file, e.g. 64MiB; past it the log "
                 "rotates (default 64MiB)")
      ->transform(CLI::AsSizeValue(false));
  app.add_option("--worker-log-keep", o.worker_log.keep,
                 "rotated log files kept beside each log (output.log.1 ...); older output is dropped (default 1)");
  CLI11_PARSE(app, argc, argv);
  if (auto bad = base::validate(o.worker_log)) {
    spdlog::critical("--worker-log-max-size / --worker-log-keep: {}", *bad);
    return 1;
  }
  // stdout carries only the "listening" lines; logs go to stderr.
  spdlog::set_default_logger(spdlog::stderr_color_mt("musterd"));
  spdlog::set_level(spdlog::level::from_str(log_level));

  for (const auto& kv : backend_opts) {
    const auto eq = kv.find('=');
    if (eq == std::string::npos) {
      spdlog::critical("--backend-opt: expected key=value: {}", kv);
      return 1;
    }
    o.backend_options[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  o.project_dir = project_dir;
  o.state_dir = state_dir;
  o.agent_path = agent_path;
  o.startup_timeout = seconds(startup_timeout);
  o.heartbeat_timeout = seconds(heartbeat_timeout);
  o.heartbeat_interval = seconds(heartbeat_interval);
  o.stop_grace = seconds(stop_grace);
  o.await_settle = seconds(await_settle);
  o.retention.retain_for = std::chrono::seconds(static_cast<long long>(retain_finished));
  http.read_timeout = seconds(read_timeout);
  http.idle_timeout = seconds(idle_timeout);

  // Signals are taken by the main thread only (Daemon::run); blocked before
  // any thread starts, so every thread inherits the mask.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  ::signal(SIGPIPE, SIG_IGN);
  raise_file_limit();

  auto daemon = service::Daemon::start(std::move(o));
  if (!daemon) {
    spdlog::critical("{}", daemon.status().message());
    return 1;
  }
  daemon.value()->run();
  return 0;
}
