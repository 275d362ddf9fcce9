#include "service/daemon.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <iostream>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "api/base/atomic_file.h"
#include "service/agent_routes.h"
#include "service/validation.h"
#include "service/worker_python.h"
#include "service/worker_routes.h"
#include "workers/factory.h"

namespace muster::service {

namespace fs = std::filesystem;

namespace {

api::Status failed(const std::string& step, const api::Status& s) {
  return api::Status(s.code(), step + ": " + s.message(), s.field());
}

// Up to `limit` objects with ids after `after`, in id order, from a list.
template <class T, class ToJson>
std::vector<nlohmann::json> after_id(std::vector<T> all, const std::string& after, size_t limit, ToJson to_json) {
  std::sort(all.begin(), all.end(), [](const T& a, const T& b) { return a.id < b.id; });
  std::vector<nlohmann::json> out;
  for (const auto& x : all) {
    if (!after.empty() && x.id <= after) continue;
    if (out.size() == limit) break;
    out.push_back(to_json(x));
  }
  return out;
}

// What a notebook or shell on this host sets to use this daemon: the lines
// musterd prints once it serves (the SDK's package, the muster and
// horovodrun commands beside musterd, a state dir other than ~/.muster).
std::string notebook_exports(const WorkerPython& python, const fs::path& state, const fs::path& default_state) {
  std::error_code ec;
  const fs::path bin = fs::read_symlink("/proc/self/exe", ec).parent_path();
  std::string out;
  if (!ec && fs::exists(bin / "muster", ec)) out += "  export PATH=\"" + bin.string() + ":$PATH\"\n";
  if (python.found()) out += "  export PYTHONPATH=\"" + python.sdk_dir.string() + "${PYTHONPATH:+:$PYTHONPATH}\"\n";
  if (!default_state.empty() && fs::weakly_canonical(default_state, ec) != state) {
    out += "  export MUSTER_STATE_DIR=\"" + state.string() + "\"\n";
  }
  return out;
}

}  // namespace

api::Result<std::unique_ptr<Daemon>> Daemon::start(DaemonOptions options) {
  std::unique_ptr<Daemon> d(new Daemon(std::move(options)));
  if (auto s = d->build(); !s) return s;
  return d;
}

api::Status Daemon::build() {
  if (auto s = open_state_dir(); !s) return s;             // 1.
  if (auto s = start_backend(); !s) return s;              // 2.
  HttpServerOptions http = options_.http;
  if (auto s = bind_listener(http); !s) return s;          // 3.
  if (auto s = open_stores(); !s) return s;                // 4.
  const RegistryOptions ropts = registry_options();
  if (auto s = start_registry(ropts); !s) return s;
  if (auto s = start_cluster_manager(ropts.capacity); !s) return s;
  start_views();
  return serve(http, ropts.worker_python);                 // 5.
}

// 1. The state dir, its lock, the project dir, the token.
api::Status Daemon::open_state_dir() {
  std::error_code ec;
  fs::create_directories(options_.state_dir, ec);
  fs::permissions(options_.state_dir, fs::perms::owner_all, fs::perm_options::replace, ec);
  state_ = fs::canonical(options_.state_dir, ec);
  if (ec) return failed("state dir", api::internal_error("cannot create " + options_.state_dir.string()));
  auto locked = StateDirLock::acquire(state_);
  if (!locked) return failed("state dir", locked.status());
  lock_.emplace(std::move(locked).value());
  project_ = fs::canonical(options_.project_dir, ec);
  if (ec || !fs::is_directory(project_)) {
    return failed("project dir", api::invalid_argument(options_.project_dir.string() + " is not a directory"));
  }
  auto token = load_or_create_token(state_);
  if (!token) return failed("token", token.status());
  token_ = token.value();
  if (options_.agent_path.empty()) {
    options_.agent_path = fs::read_symlink("/proc/self/exe").parent_path() / "muster-agent";
  }
  return api::Status::ok();
}

// 2. The backend, and the GPU inventory: --gpus, else nvidia-smi, else none.
api::Status Daemon::start_backend() {
  workers::BackendOptions bopts;
  bopts.name = options_.backend;
  bopts.state_dir = state_;
  bopts.options = options_.backend_options;
  auto backend = workers::create_backend(bopts);
  if (!backend) return failed("backend", backend.status());
  backend_ = std::move(backend).value();
  if (options_.gpus) {
    auto parsed = parse_gpu_list(*options_.gpus);
    if (!parsed) return failed("--gpus", parsed.status());
    gpu_devices_ = parsed.value();
  } else {
    gpu_devices_ = discover_gpus();
  }
  gpus_ = std::make_unique<GpuInventory>(gpu_devices_);
  return api::Status::ok();
}

// 3. The listening socket (its port is final from here on), TLS, auth.
api::Status Daemon::bind_listener(HttpServerOptions& http) {
  const auto colon = options_.listen.rfind(':');
  if (colon == std::string::npos) {
    return failed("--listen", api::invalid_argument("expected HOST:PORT: " + options_.listen));
  }
  http.host = options_.listen.substr(0, colon);
  http.port = std::atoi(options_.listen.c_str() + colon + 1);
  if (auto s = choose_tls(http); !s) return failed("TLS", s);
  http.on_response = [this](const std::string& method, const std::string& route, int status, double s) {
    metrics_.observe_request(method, route.empty() ? "(unmatched)" : route, status, s);
  };
  auth_ = std::make_unique<Authenticator>(token_, [this](const std::string& t) -> std::optional<std::string> {
    return registry_ ? registry_->worker_for_agent_token(t) : std::nullopt;
  });
  server_ = std::make_unique<HttpServer>(http, router_, *auth_);
  if (auto s = server_->listen(); !s) {
    if (s.message().find("in use") == std::string::npos) return failed("listen", s);
    return failed("listen", api::Status(s.code(), s.message() + " (another musterd may be serving " + options_.listen +
                                                      "; stop it, or pick another address with --listen " +
                                                      http.host + ":PORT, 0: any free port)"));
  }
  port_ = server_->port();
  return api::Status::ok();
}

// 4a. The state database (workers, clusters) and the training curves
// (<state>/training.db, service/metrics/series_store.h).
api::Status Daemon::open_stores() {
  const std::string db = (state_ / "musterd.db").string();
  auto store = Store::open(db);
  if (!store) return failed("state database", store.status());
  store_ = std::move(store).value();
  store_->set_health(&health_);
  store_->set_write_observer([this](double s) { metrics_.observe_store_write(s); });
  auto cluster_store = ClusterStore::open(db);
  if (!cluster_store) return failed("state database", cluster_store.status());
  cluster_store_ = std::move(cluster_store).value();
  cluster_store_->set_health(&health_);
  auto series_store = SeriesStore::open((state_ / "training.db").string());
  if (!series_store) return failed("training curves", series_store.status());
  series_store_ = std::move(series_store).value();
  training_ = std::make_unique<TrainingSeries>(TrainingSeriesOptions{}, series_store_.get());
  if (auto s = training_->restore(); !s) {
    spdlog::warn("training curves of an earlier daemon not restored: {}", s.message());
  }
  return api::Status::ok();
}

RegistryOptions Daemon::registry_options() {
  RegistryOptions ropts;
  ropts.state_dir = state_;
  ropts.project_dir = project_;
  ropts.agent_path = options_.agent_path;
  ropts.daemon_port = port_;
  if (tls_) ropts.daemon_tls_fingerprint = tls_->fingerprint;
  ropts.worker_log = options_.worker_log;
  ropts.startup_timeout = options_.startup_timeout;
  ropts.heartbeat_timeout = options_.heartbeat_timeout;
  ropts.heartbeat_interval = options_.heartbeat_interval;
  ropts.heartbeat_rate = options_.heartbeat_rate;
  ropts.stop_grace = options_.stop_grace;
  ropts.await_settle = options_.await_settle;
  ropts.worker_python = find_worker_python();
  ropts.retention = options_.retention;
  ropts.gpus = gpus_.get();
  // Workers of these backends run on this host: launches are admitted
  // against it (registry/registry.h, "Admission"); ssh and slurm place or queue
  // workers themselves.
  if (options_.backend == "local" || options_.backend == "container") {
    ropts.capacity = host_capacity();
    spdlog::info("admission: this host has {} CPUs and {:.1f} GB; past them a launch {}", ropts.capacity->cpus,
                 ropts.capacity->memory_gb,
                 options_.overcommit ? "runs with a warning (--overcommit=true)"
                                     : "waits in scheduling until there is room (--overcommit=false)");
  }
  ropts.overcommit = options_.overcommit;
  ropts.on_heartbeat_gap = [this](double s, double told) { metrics_.observe_heartbeat_gap(s, told); };
  ropts.metrics_token = [t = token_](const std::string& id) { return metrics_token(t, id); };
  return ropts;
}

// 4b. The followed logs and the registry, restoring the workers of an
// earlier daemon, with the worker and agent routes.
api::Status Daemon::start_registry(const RegistryOptions& ropts) {
  LogFollowerOptions follow_options;
  follow_options.max_followers = options_.max_log_followers;
  follower_ = std::make_unique<LogFollower>(follow_options);
  registry_ = std::make_unique<WorkerRegistry>(ropts, *backend_, store_.get(), clock_);
  if (auto s = registry_->restore(options_.restore); !s) return failed("restoring state", s);
  // Workers of these backends run on this host: asks beyond it get a warning.
  register_worker_routes(router_, *registry_, {options_.max_workers, project_, ropts.capacity}, follower_.get(),
                         &health_);
  register_agent_routes(router_, *registry_);
  return api::Status::ok();
}

// 4c. The clusters (restoring those of an earlier daemon) and their routes.
api::Status Daemon::start_cluster_manager(const std::optional<HostCapacity>& host) {
  StartClustersOptions copts;
  copts.state_dir = state_;
  copts.project_dir = project_;
  copts.max_workers = options_.max_workers;
  copts.agent_path = options_.agent_path;
  copts.mpi_hosts = workers::mpi_hosts_of(*backend_);
  copts.follower = follower_.get();
  copts.host = host;
  copts.retain_for = options_.retention.retain_for;
  copts.max_finished = options_.max_finished_clusters;
  clusters_ = start_clusters(router_, *registry_, cluster_store_.get(), clock_, copts);
  if (auto s = clusters_->restore(); !s) return failed("restoring clusters", s);
  return api::Status::ok();
}

// 4d. What watches the registry and the clusters: the dashboard (its
// sessions, its event stream), /metrics and the training routes.
void Daemon::start_views() {
  SessionOptions session_options;
  session_options.cookie_name = "muster_session_" + std::to_string(port_);
  session_options.secure = tls_.has_value();
  sessions_ = std::make_unique<SessionStore>(session_options);
  EventHubOptions hub_options;
  hub_options.max_streams = options_.max_event_streams;
  SnapshotSource source;
  source.workers = [this](const std::string& after, size_t limit) {
    std::vector<nlohmann::json> out;
    for (const auto& w : registry_->page_by_id(after, limit)) out.push_back(api::to_json(w));
    return out;
  };
  source.clusters = [this](const std::string& after, size_t limit) {
    return after_id(clusters_->list(), after, limit, [](const api::Cluster& c) { return c.to_json(); });
  };
  events_ = std::make_unique<EventHub>(hub_options, source);
  std::error_code ec;
  const fs::path dashboard_files = find_dashboard_dir(options_.dashboard_dir);
  if (!fs::exists(dashboard_files / "index.html", ec)) {
    spdlog::warn("no dashboard files in {} (--dashboard-dir): GET / will answer 404", dashboard_files.string());
  }
  registry_->subscribe([this](const api::Worker& w) {
    metrics_.on_worker_change(w);
    events_->publish("worker", api::to_json(w));
  });
  clusters_->subscribe([this](const api::Cluster& c) { events_->publish("cluster", c.to_json()); });
  register_training_routes(router_, *registry_, *clusters_, *training_,
                           [this](const std::string& worker, const std::optional<std::string>& cluster,
                                  const std::vector<TrainingPoint>& points) {
                             nlohmann::json arr = nlohmann::json::array();
                             for (const auto& p : points) arr.push_back(to_json(p));
                             events_->publish("metrics", {{"worker", worker},
                                                          {"cluster", cluster ? nlohmann::json(*cluster) : nullptr},
                                                          {"points", arr}});
                           });
  DaemonMetrics::Sources sources;
  sources.backend = backend_->name();
  sources.worker_counts = [this] { return registry_->count_by_status(); };
  sources.clusters = [this] { return clusters_->list(); };
  sources.max_heartbeat_age = [this] { return registry_->max_heartbeat_age_seconds(); };
  sources.heartbeat_interval = [this] {
    return std::chrono::duration<double>(registry_->heartbeat_interval_now()).count();
  };
  sources.training = training_.get();
  register_dashboard_routes(router_, {dashboard_files, token_}, *sessions_, *events_, metrics_, sources);
  auth_->set_sessions([this](const std::string& cookie) -> std::optional<std::string> {
    auto session = sessions_->from_cookie_header(cookie);
    if (!session) return std::nullopt;
    return session->csrf_token;
  });
}

// 5. Serve; then musterd.json, the lines SDKs and tests wait for, the
// dashboard's login URL and a notebook's exports.
api::Status Daemon::serve(const HttpServerOptions& http, const WorkerPython& python) {
  if (auto s = server_->start(); !s) return failed("listen", s);
  url_ = std::string(tls_ ? "https://" : "http://") + (http.host == "0.0.0.0" ? std::string("127.0.0.1") : http.host) +
         ":" + std::to_string(port_);
  nlohmann::json daemon_json = {{"url", url_}, {"pid", ::getpid()}};
  // What a client verifies the certificate with (the SDKs pin the fingerprint).
  if (tls_) daemon_json["tls"] = {{"cert", tls_->cert_file.string()}, {"fingerprint", tls_->fingerprint}};
  const std::string daemon_file = daemon_json.dump() + "\n";
  if (auto err = base::write_file_atomically(state_ / "musterd.json", daemon_file)) {
    spdlog::warn("cannot write {}/musterd.json: {}", state_.string(), *err);
  }
  std::cout << "musterd listening on " << url_ << std::endl;
  // Like Jupyter: the URL that logs the browser in (the token leaves the
  // address bar at once, see service/dashboard/dashboard_routes.h), in a
  // 0600 file since it holds the token.
  const std::string dashboard_url = url_ + "/?token=" + token_;
  if (auto err = base::write_file_atomically(state_ / "dashboard.url", dashboard_url + "\n", {0600})) {
    spdlog::warn("cannot write {}/dashboard.url: {}", state_.string(), *err);
  }
  std::cout << "musterd dashboard: " << dashboard_url << std::endl;
  if (const std::string exports = notebook_exports(python, state_, options_.default_state_dir); !exports.empty()) {
    std::cout << "musterd: for a notebook or shell on this host:\n" << exports << std::flush;
  }
  if (python.found()) {
    spdlog::info("workers import muster from {} (found in {}{}{})", python.sdk_dir.string(), python.found_in,
                 python.runtime_dir.empty() ? "" : "; runtime extension in ", python.runtime_dir.string());
  } else {
    spdlog::warn("no muster Python package beside musterd (a build tree or an install prefix): workers import "
                 "muster only where their Python has it installed (pip install ./sdk/python)");
  }
  spdlog::info("backend {} (workers reach the daemon at {}), project {}, state {}, GPUs [{}]", backend_->name(),
               registry_->agent_url(), project_.string(), state_.string(), device_list(gpu_devices_));
  return api::Status::ok();
}

// Plain HTTP on loopback; TLS beyond it or with --tls-cert, with the given
// certificate or the state dir's self-signed one (named for every address a
// client or worker may use: loopback, the listen address, the workers'
// master address, this host's name).
api::Status Daemon::choose_tls(HttpServerOptions& http) {
  const bool given = !options_.tls_cert.empty() || !options_.tls_key.empty();
  if (!given && (is_loopback_host(http.host) || options_.insecure_http)) {
    if (!is_loopback_host(http.host)) {
      spdlog::warn("--insecure-http: serving plain HTTP on {}: the token and every agent's token cross the network "
                   "in the clear; drop --insecure-http to serve TLS",
                   options_.listen);
    }
    return api::Status::ok();
  }
  if (given) {
    auto id = given_tls_identity(options_.tls_cert, options_.tls_key);
    if (!id) return id.status();
    tls_ = std::move(id).value();
  } else {
    std::vector<std::string> names = {"127.0.0.1", "localhost"};
    char host[256] = {};
    if (::gethostname(host, sizeof host - 1) == 0 && host[0]) names.push_back(host);
    for (const std::string& n : {http.host, backend_->master_address()}) {
      if (!n.empty() && n != "0.0.0.0" && std::find(names.begin(), names.end(), n) == names.end()) names.push_back(n);
    }
    auto id = self_signed_tls_identity(state_, names);
    if (!id) return id.status();
    tls_ = std::move(id).value();
  }
  http.tls = TlsServerFiles{tls_->cert_file.string(), tls_->key_file.string()};
  spdlog::info("serving TLS on {} with {} (SHA-256 {})", options_.listen, tls_->cert_file.string(),
               tls_->fingerprint);
  return api::Status::ok();
}

int Daemon::run() {
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  const timespec tick = {0, 100'000'000};
  for (;;) {
    const int sig = sigtimedwait(&signals, nullptr, &tick);
    if (sig == SIGTERM || sig == SIGINT) {
      spdlog::info("signal {}: shutting down", sig);
      return sig;
    }
    registry_->tick();
  }
}

Daemon::~Daemon() { shutdown(); }

// The teardown order of daemon.h, a) to e); every part is ended here, none
// is left to the members' destruction order.
void Daemon::shutdown() {
  // a) No request runs any more: the followed streams end (so none holds up
  //    the server's stop), then the HTTP server (no handler runs after it).
  if (follower_) follower_->shutdown();
  if (server_) server_->stop();
  follower_.reset();  // asks nothing of the registry after this
  // b) The clusters: their launchers (mpirun) end before the backend goes.
  clusters_.reset();
  // c) The registry's queued backend work, then the backend itself.
  if (registry_) registry_->shutdown();  // no launch reaches the backend after this
  if (backend_) backend_->shutdown();
  // d) What reads the registry (the event hub's snapshots), then the
  //    registry; the files that said this daemon serves.
  events_.reset();
  registry_.reset();
  if (!url_.empty()) {
    std::error_code ec;
    fs::remove(state_ / "musterd.json", ec);
    fs::remove(state_ / "dashboard.url", ec);
    url_.clear();
  }
  // e) The rest, users before what they use: sessions, the training curves
  //    and their store, the state stores, the server and its authenticator,
  //    the GPU inventory, the backend; the state directory's lock last.
  sessions_.reset();
  training_.reset();
  series_store_.reset();
  cluster_store_.reset();
  store_.reset();
  server_.reset();
  auth_.reset();
  gpus_.reset();
  backend_.reset();
  lock_.reset();
}

}  // namespace muster::service
