// musterd: the daemon. Start-up order matters and is:
//  1. flags, state dir, token;
//  2. the backend (before listening: a container bridge must exist before
//     agents call in);
//  3. the listening socket (port 0: the kernel picks one), bound but not
//     served yet, so that the port is final before anything needs it;
//  4. the state store, the registry (restoring the workers of an earlier
//     daemon; agents reach it at the backend's master address and this
//     port), the routes, built once;
//  5. serving; then <state-dir>/musterd.json and the line
//     "musterd listening on http://HOST:PORT" on stdout (SDKs and tests
//     wait for it);
//  6. the main thread ticks the registry every 100 ms until SIGTERM/SIGINT.
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>

#include <CLI/CLI.hpp>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include "api/base/atomic_file.h"
#include "service/agent_routes.h"
#include "service/auth.h"
#include "service/cluster_routes.h"
#include "service/clock.h"
#include "service/gpu_inventory.h"
#include "service/dashboard/dashboard_routes.h"
#include "service/metrics/training_routes.h"
#include "service/http_server.h"
#include "service/log_follower.h"
#include "service/registry.h"
#include "service/router.h"
#include "service/store.h"
#include "service/worker_python.h"
#include "service/worker_routes.h"
#include "workers/factory.h"

namespace fs = std::filesystem;
using namespace muster;

namespace {

int fail(const std::string& what, const api::Status& s) {
  spdlog::critical("{}: {}", what, s.message());
  return 1;
}

bool write_daemon_file(const fs::path& state_dir, const std::string& url) {
  const std::string text = nlohmann::json{{"url", url}, {"pid", ::getpid()}}.dump() + "\n";
  if (auto err = base::write_file_atomically(state_dir / "musterd.json", text)) {
    spdlog::error("{}", *err);
    return false;
  }
  return true;
}

// <state-dir>/dashboard.url (0600: it holds the token), like Jupyter's
// runtime files.
bool write_dashboard_file(const fs::path& state_dir, const std::string& url) {
  if (auto err = base::write_file_atomically(state_dir / "dashboard.url", url + "\n", {0600})) {
    spdlog::error("{}", *err);
    return false;
  }
  return true;
}

// What a notebook or shell on this host sets to use this daemon: the lines
// musterd prints once it serves (the SDK's package, the muster and
// horovodrun commands beside musterd, a state dir other than ~/.muster).
std::string notebook_exports(const muster::service::WorkerPython& python, const fs::path& state,
                             const fs::path& default_state) {
  std::error_code ec;
  const fs::path bin = fs::read_symlink("/proc/self/exe", ec).parent_path();
  std::string out;
  if (!ec && fs::exists(bin / "muster", ec)) out += "  export PATH=\"" + bin.string() + ":$PATH\"\n";
  if (python.found()) out += "  export PYTHONPATH=\"" + python.sdk_dir.string() + "${PYTHONPATH:+:$PYTHONPATH}\"\n";
  if (fs::weakly_canonical(default_state, ec) != state) out += "  export MUSTER_STATE_DIR=\"" + state.string() + "\"\n";
  return out;
}

std::chrono::milliseconds seconds(double s) { return std::chrono::milliseconds(static_cast<long>(s * 1000)); }

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"musterd: launches workers for distributed training and serves the muster REST API"};
  app.option_defaults()->always_capture_default();  // --help shows every default
  std::string listen = "127.0.0.1:7878";
  std::string project_dir = fs::current_path().string();
  const char* home = std::getenv("HOME");
  std::string state_dir = std::string(home ? home : "/tmp") + "/.muster";
  const std::string default_state_dir = state_dir;
  std::string backend_name = "local";
  std::vector<std::string> backend_opts;
  int max_workers = 64;
  double startup_timeout = 60, heartbeat_timeout = 10, heartbeat_interval = 2, stop_grace = 3, await_settle = 1;
  service::HttpServerOptions http;  // limits: docs/ARCHITECTURE.md, "Limits"
  double read_timeout = 10, idle_timeout = 60;
  std::string agent_path;
  std::string dashboard_dir;
  int max_event_streams = 32;
  std::string log_level = "info";
  std::optional<std::string> gpus_flag;
  size_t max_followers = 256;
  base::RotatingLogOptions worker_log;  // each worker's output.log and each cluster's launcher.log
  app.add_option("--listen", listen, "HOST:PORT to listen on (port 0: any free port)");
  app.add_option("--project-dir", project_dir, "scripts are resolved inside this directory");
  app.add_option("--state-dir", state_dir, "token, state database, worker logs");
  app.add_option("--backend", backend_name, "where workers run: local, container, ssh, slurm");
  app.add_option("--backend-opt", backend_opts, "backend setting key=value (repeatable)");
  app.add_option("--max-workers", max_workers, "largest n of one launch")->check(CLI::Range(1, 100000));
  app.add_option("--startup-timeout", startup_timeout, "seconds for an agent to register before timedout");
  app.add_option("--heartbeat-timeout", heartbeat_timeout, "seconds without heartbeat before lost");
  app.add_option("--heartbeat-interval", heartbeat_interval, "seconds between agent heartbeats");
  app.add_option("--stop-grace", stop_grace, "seconds between SIGTERM and SIGKILL when stopping");
  app.add_option("--await-settle", await_settle,
                 "seconds a script must have run before await (wait_for_completion=false) counts it as running")
      ->check(CLI::Range(0.0, 60.0));
  app.add_option("--max-body-bytes", http.max_body_bytes, "largest request body accepted (413 above)");
  app.add_option("--http-max-header-bytes", http.max_header_bytes, "largest request line + headers (431 above)");
  app.add_option("--http-max-connections", http.max_connections, "open connections (503 above)")
      ->check(CLI::Range(1, 1 << 20));
  app.add_option("--http-read-timeout", read_timeout, "seconds a client has to send one whole request")
      ->check(CLI::PositiveNumber);
  app.add_option("--http-idle-timeout", idle_timeout, "seconds a keep-alive connection may idle")
      ->check(CLI::PositiveNumber);
  app.add_option("--http-io-threads", http.io_threads, "threads serving sockets")->check(CLI::Range(1, 64));
  app.add_option("--http-handler-threads", http.handler_threads, "threads running request handlers")
      ->check(CLI::Range(1, 1024));
  app.add_option("--agent-path", agent_path, "the agent program (default: muster-agent beside musterd)");
  app.add_option("--dashboard-dir", dashboard_dir, "the dashboard's files (default: installed beside musterd)");
  app.add_option("--max-event-streams", max_event_streams, "open dashboard event streams (503 above)")
      ->check(CLI::Range(1, 4096));
  app.add_option("--log-level", log_level, "trace, debug, info, warn, error");
  app.add_option("--gpus", gpus_flag,
                 "GPU device indices of this host workers may reserve, e.g. 0,1 (\"\": none; "
                 "default: what nvidia-smi -L lists, none without it)");
  app.add_option("--max-log-followers", max_followers, "streams of followed logs at once (503 above)")
      ->check(CLI::Range(1, 100000));
  app.add_option("--worker-log-max-size", worker_log.max_bytes,
                 "size cap of each worker's and cluster launcher's log file, e.g. 64MiB; past it the log "
                 "rotates (default 64MiB)")
      ->transform(CLI::AsSizeValue(false));
  app.add_option("--worker-log-keep", worker_log.keep,
                 "rotated log files kept beside each log (output.log.1 ...); older output is dropped (default 1)");
  CLI11_PARSE(app, argc, argv);
  if (auto bad = base::validate(worker_log)) {
    return fail("--worker-log-max-size / --worker-log-keep", api::invalid_argument(*bad));
  }
  // stdout carries only the "listening" line; logs go to stderr.
  spdlog::set_default_logger(spdlog::stderr_color_mt("musterd"));
  spdlog::set_level(spdlog::level::from_str(log_level));

  // Signals are taken by the main thread only (sigtimedwait below).
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  ::signal(SIGPIPE, SIG_IGN);

  // 1. State dir and token.
  std::error_code ec;
  fs::create_directories(state_dir, ec);
  fs::permissions(state_dir, fs::perms::owner_all, fs::perm_options::replace, ec);
  const fs::path state = fs::canonical(state_dir, ec);
  if (ec) return fail("state dir", api::internal_error("cannot create " + state_dir));
  const fs::path project = fs::canonical(project_dir, ec);
  if (ec || !fs::is_directory(project)) {
    return fail("project dir", api::invalid_argument(project_dir + " is not a directory"));
  }
  auto token = service::load_or_create_token(state);
  if (!token) return fail("token", token.status());
  if (agent_path.empty()) agent_path = (fs::read_symlink("/proc/self/exe").parent_path() / "muster-agent").string();

  // 2. The backend.
  workers::BackendOptions bopts;
  bopts.name = backend_name;
  bopts.state_dir = state;
  for (const auto& kv : backend_opts) {
    const auto eq = kv.find('=');
    if (eq == std::string::npos) return fail("--backend-opt", api::invalid_argument("expected key=value: " + kv));
    bopts.options[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  auto backend = workers::create_backend(bopts);
  if (!backend) return fail("backend", backend.status());

  // The GPU inventory: --gpus, else nvidia-smi, else none.
  std::vector<int> gpu_devices;
  if (gpus_flag) {
    auto parsed = service::parse_gpu_list(*gpus_flag);
    if (!parsed) return fail("--gpus", parsed.status());
    gpu_devices = parsed.value();
  } else {
    gpu_devices = service::discover_gpus();
  }
  service::GpuInventory gpus(gpu_devices);

  // 3. The listening socket (its port is final from here on).
  const auto colon = listen.rfind(':');
  if (colon == std::string::npos) return fail("--listen", api::invalid_argument("expected HOST:PORT: " + listen));
  http.host = listen.substr(0, colon);
  http.port = std::atoi(listen.c_str() + colon + 1);
  http.read_timeout = seconds(read_timeout);
  http.idle_timeout = seconds(idle_timeout);
  std::unique_ptr<service::WorkerRegistry> registry;
  std::unique_ptr<service::ClusterManager> clusters;  // watches the registry: destroyed before it
  service::DaemonMetrics metrics;  // outlives the server (its on_response) and the registry's listeners
  http.on_response = [&metrics](const std::string& method, const std::string& route, int status, double s) {
    metrics.observe_request(method, route.empty() ? "(unmatched)" : route, status, s);
  };
  service::Router router;  // filled below, before the server serves
  service::Authenticator auth(token.value(), [&registry](const std::string& t) -> std::optional<std::string> {
    return registry ? registry->worker_for_agent_token(t) : std::nullopt;
  });
  auto server = std::make_unique<service::HttpServer>(http, router, auth);
  if (auto s = server->listen(); !s) {
    if (s.message().find("in use") == std::string::npos) return fail("listen", s);
    return fail("listen", api::Status(s.code(), s.message() + " (another musterd may be serving " + listen +
                                                     "; stop it, or pick another address with --listen " +
                                                     http.host + ":PORT, 0: any free port)"));
  }
  http.port = server->port();

  // 4. Store, registry, routes.
  auto store = service::Store::open((state / "musterd.db").string());
  if (!store) return fail("state database", store.status());

  service::SystemClock clock;
  service::RegistryOptions ropts;
  ropts.state_dir = state;
  ropts.project_dir = project;
  ropts.agent_path = agent_path;
  ropts.daemon_port = http.port;
  ropts.worker_log = worker_log;
  ropts.startup_timeout = seconds(startup_timeout);
  ropts.heartbeat_timeout = seconds(heartbeat_timeout);
  ropts.heartbeat_interval = seconds(heartbeat_interval);
  ropts.stop_grace = seconds(stop_grace);
  ropts.await_settle = seconds(await_settle);
  ropts.gpus = &gpus;
  ropts.worker_python = service::find_worker_python();
  // The dashboard and the training curves (outlive the registry: its
  // listeners publish to them).
  // Curves live in <state>/training.db (service/metrics/series_store.h).
  auto series_store = service::SeriesStore::open((state / "training.db").string());
  if (!series_store) return fail("training curves", series_store.status());
  service::TrainingSeries training({}, series_store.value().get());
  if (auto s = training.restore(); !s) spdlog::warn("training curves of an earlier daemon not restored: {}", s.message());
  service::SessionOptions session_options;
  session_options.cookie_name = "muster_session_" + std::to_string(http.port);
  service::SessionStore sessions(session_options);
  service::EventHubOptions hub_options;
  hub_options.max_streams = static_cast<size_t>(max_event_streams);
  service::EventHub events(hub_options, [&registry, &clusters] {
    nlohmann::json workers = nlohmann::json::array(), list = nlohmann::json::array();
    for (const auto& w : registry->list()) workers.push_back(api::to_json(w));
    for (const auto& c : clusters->list()) list.push_back(c.to_json());
    return nlohmann::json{{"workers", workers}, {"clusters", list}};
  });
  ropts.on_heartbeat_gap = [&metrics](double s) { metrics.observe_heartbeat_gap(s); };
  ropts.metrics_token = [t = token.value()](const std::string& id) { return service::metrics_token(t, id); };
  store.value()->set_write_observer([&metrics](double s) { metrics.observe_store_write(s); });
  const fs::path dashboard_files = service::find_dashboard_dir(dashboard_dir);
  if (!fs::exists(dashboard_files / "index.html", ec)) {
    spdlog::warn("no dashboard files in {} (--dashboard-dir): GET / will answer 404", dashboard_files.string());
  }
  auto cluster_store = service::ClusterStore::open((state / "musterd.db").string());
  if (!cluster_store) return fail("state database", cluster_store.status());
  // Asks the registry and clusters whether a followed log ended: destroyed before them.
  service::LogFollowerOptions follow_options;
  follow_options.max_followers = max_followers;
  auto follower = std::make_unique<service::LogFollower>(follow_options);
  registry = std::make_unique<service::WorkerRegistry>(ropts, *backend.value(), store.value().get(), clock);
  if (auto s = registry->restore(); !s) return fail("restoring state", s);
  // Workers of these backends run on this host: asks beyond it get a warning.
  std::optional<service::HostCapacity> host;
  if (backend_name == "local" || backend_name == "container") host = service::host_capacity();
  service::register_worker_routes(router, *registry, {max_workers, project, host}, follower.get());
  service::register_agent_routes(router, *registry);
  clusters = service::start_clusters(router, *registry, cluster_store.value().get(), clock,
                                     {state, project, max_workers, agent_path,
                                      workers::mpi_hosts_of(*backend.value()), follower.get(), host});
  if (auto s = clusters->restore(); !s) return fail("restoring clusters", s);
  registry->subscribe([&events, &metrics](const api::Worker& w) {
    metrics.on_worker_change(w);
    events.publish("worker", api::to_json(w));
  });
  clusters->subscribe([&events](const api::Cluster& c) { events.publish("cluster", c.to_json()); });
  service::register_training_routes(
      router, *registry, *clusters, training,
      [&events](const std::string& worker, const std::optional<std::string>& cluster,
                const std::vector<service::TrainingPoint>& points) {
        nlohmann::json arr = nlohmann::json::array();
        for (const auto& p : points) arr.push_back(service::to_json(p));
        events.publish("metrics", {{"worker", worker}, {"cluster", cluster ? nlohmann::json(*cluster) : nullptr},
                                   {"points", arr}});
      });
  service::DaemonMetrics::Sources sources;
  sources.backend = backend.value()->name();
  sources.workers = [r = registry.get()] { return r->list(); };
  sources.clusters = [c = clusters.get()] { return c->list(); };
  sources.max_heartbeat_age = [r = registry.get()] { return r->max_heartbeat_age_seconds(); };
  sources.training = &training;
  service::register_dashboard_routes(router, {dashboard_files, token.value()}, sessions, events, metrics, sources);
  auth.set_sessions([&sessions](const std::string& cookie) -> std::optional<std::string> {
    auto session = sessions.from_cookie_header(cookie);
    if (!session) return std::nullopt;
    return session->csrf_token;
  });
  // 5. Serve.
  if (auto s = server->start(); !s) return fail("listen", s);
  const std::string url =
      "http://" + (http.host == "0.0.0.0" ? std::string("127.0.0.1") : http.host) + ":" + std::to_string(http.port);
  if (!write_daemon_file(state, url)) spdlog::warn("cannot write {}/musterd.json", state.string());
  std::cout << "musterd listening on " << url << std::endl;
  // Like Jupyter: the URL that logs the browser in (the token leaves the
  // address bar at once, see service/dashboard/dashboard_routes.h).
  const std::string dashboard_url = url + "/?token=" + token.value();
  if (!write_dashboard_file(state, dashboard_url)) spdlog::warn("cannot write {}/dashboard.url", state.string());
  std::cout << "musterd dashboard: " << dashboard_url << std::endl;
  if (const std::string exports = notebook_exports(ropts.worker_python, state, default_state_dir); !exports.empty()) {
    std::cout << "musterd: for a notebook or shell on this host:\n" << exports << std::flush;
  }
  if (ropts.worker_python.found()) {
    spdlog::info("workers import muster from {} (found in {}{}{})", ropts.worker_python.sdk_dir.string(),
                 ropts.worker_python.found_in, ropts.worker_python.runtime_dir.empty() ? "" : "; runtime extension in ",
                 ropts.worker_python.runtime_dir.string());
  } else {
    spdlog::warn("no muster Python package beside musterd (a build tree or an install prefix): workers import "
                 "muster only where their Python has it installed (pip install ./sdk/python)");
  }
  spdlog::info("backend {} (workers reach the daemon at {}), project {}, state {}, GPUs [{}]",
               backend.value()->name(), registry->agent_url(), project.string(), state.string(),
               service::device_list(gpu_devices));

  // 6. Tick until told to stop.
  const timespec tick = {0, 100'000'000};
  for (;;) {
    const int sig = sigtimedwait(&signals, nullptr, &tick);
    if (sig == SIGTERM || sig == SIGINT) {
      spdlog::info("signal {}: shutting down", sig);
      break;
    }
    registry->tick();
  }
  follower->shutdown();  // ends the followed streams, so none holds up the server's stop
  server->stop();
  follower.reset();  // asks nothing of the registry after this
  clusters.reset();  // ends cluster launchers (mpirun) before the backend goes
  registry->shutdown();  // no launch reaches the backend after this
  backend.value()->shutdown();
  registry.reset();  // while the EventHub and metrics its listeners publish to still exist
  fs::remove(state / "musterd.json", ec);
  fs::remove(state / "dashboard.url", ec);
  return 0;
}
