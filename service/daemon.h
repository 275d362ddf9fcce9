// Daemon: musterd assembled, and the one owner of every part's lifetime.
//
// start() builds the parts in this order, each from what the ones before it
// made, and fails (naming the step) without serving anything (build(), one
// private function per step):
//  1. the state directory, its lock (one daemon per directory,
//     state_dir_lock.h), the token;
//  2. the backend (before listening: a container bridge must exist before
//     agents call in) and the GPU inventory;
//  3. the listening socket (port 0: the kernel picks one), bound but not
//     served yet, so that the port is final before anything needs it; TLS
//     (service/tls_identity.h) when the address is not loopback or a
//     certificate is given: plain HTTP beyond loopback only with
//     --insecure-http;
//  4. the state store (refused when it can only be read or is damaged), the
//     registry (restoring the workers of an earlier daemon; refusing a
//     database that lost workers unless told to adopt them), the clusters,
//     the dashboard and the routes, built once;
//  5. serving; then <state-dir>/musterd.json ({url, pid, and with TLS
//     tls: {cert, fingerprint}}) and the line
//     "musterd listening on http(s)://HOST:PORT" on stdout (SDKs and tests
//     wait for it), the dashboard's login URL, and what a notebook or
//     shell on this host exports to use this daemon.
// run() ticks the registry every 100 ms on the calling thread until SIGTERM
// or SIGINT (which the caller has blocked in every thread, see main.cc).
// The destructor ends it all (shutdown()) in the one safe order, written out
// there rather than left to the members' destruction order:
//  a) followed logs, then the HTTP server (no handler runs after it);
//  b) the clusters (their launchers, before the backend goes);
//  c) the registry's queued backend work, then the backend;
//  d) the event hub (it reads the registry), the registry, musterd.json;
//  e) sessions, training curves, stores, the server, the backend's object;
//     the state directory's lock last.
#pragma once

#include <chrono>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "api/status.h"
#include "service/auth.h"
#include "service/clock.h"
#include "service/cluster/routes.h"
#include "service/dashboard/dashboard_routes.h"
#include "service/gpu_inventory.h"
#include "service/http_server.h"
#include "service/log_follower.h"
#include "service/metrics/training_routes.h"
#include "service/registry/registry.h"
#include "service/router.h"
#include "service/state_dir_lock.h"
#include "service/store.h"
#include "service/store_health.h"
#include "service/tls_identity.h"
#include "workers/backend.h"

namespace muster::service {

// musterd's flags (service/main.cc), defaults included.
struct DaemonOptions {
  std::string listen = "127.0.0.1:7878";
  std::filesystem::path project_dir;
  std::filesystem::path state_dir;
  // ~/.muster: a state dir other than it is named in the lines printed for
  // a notebook (export MUSTER_STATE_DIR=...).
  std::filesystem::path default_state_dir;
  std::string backend = "local";
  std::map<std::string, std::string> backend_options;
  int max_workers = 64;
  std::chrono::milliseconds startup_timeout{60'000};
  std::chrono::milliseconds heartbeat_timeout{10'000};
  std::chrono::milliseconds heartbeat_interval{2'000};
  double heartbeat_rate = 2500;  // RegistryOptions::heartbeat_rate
  std::chrono::milliseconds stop_grace{3'000};
  std::chrono::milliseconds await_settle{1'000};  // RegistryOptions::await_settle
  // Each worker's output.log and each cluster's launcher.log (cap, rotation).
  base::RotatingLogOptions worker_log;
  HttpServerOptions http;
  // --tls-cert/--tls-key: the certificate served; neither: a self-signed one
  // in <state>/tls when TLS is needed. --insecure-http: plain HTTP on a
  // non-loopback address (a warning).
  std::filesystem::path tls_cert;
  std::filesystem::path tls_key;
  bool insecure_http = false;
  std::filesystem::path agent_path;   // "": muster-agent beside musterd
  std::string dashboard_dir;          // "": find_dashboard_dir's default
  size_t max_event_streams = 32;
  std::optional<std::string> gpus;    // --gpus, else nvidia-smi
  size_t max_log_followers = 256;
  RetentionOptions retention;         // workers
  // Past the host's CPUs or memory (local, container): a launch runs with a
  // warning (true), or its workers wait in scheduling (false).
  bool overcommit = true;
  size_t max_finished_clusters = 1000;
  RestoreOptions restore;
};

class Daemon {
 public:
  // Steps 1-5 above; the error names the step that failed.
  static api::Result<std::unique_ptr<Daemon>> start(DaemonOptions options);
  ~Daemon();
  Daemon(const Daemon&) = delete;
  Daemon& operator=(const Daemon&) = delete;

  // Ticks until SIGTERM or SIGINT (blocked by the caller); returns the signal.
  int run();
  const std::string& url() const { return url_; }

 private:
  explicit Daemon(DaemonOptions options) : options_(std::move(options)) {}
  api::Status build();  // steps 1-5, each one of these:
  api::Status open_state_dir();                         // 1.
  api::Status start_backend();                          // 2.
  api::Status bind_listener(HttpServerOptions& http);   // 3.
  api::Status choose_tls(HttpServerOptions& http);      // 3: sets tls_ and http.tls, or neither
  api::Status open_stores();                            // 4.
  RegistryOptions registry_options();
  api::Status start_registry(const RegistryOptions& ropts);
  api::Status start_cluster_manager(const std::optional<HostCapacity>& host);
  void start_views();
  api::Status serve(const HttpServerOptions& http, const WorkerPython& python);  // 5.
  void shutdown();  // a) to e) above

  DaemonOptions options_;
  std::filesystem::path state_;
  std::filesystem::path project_;  // canonical
  int port_ = 0;                   // the bound port, final after step 3
  std::vector<int> gpu_devices_;
  std::string url_;
  std::optional<TlsIdentity> tls_;  // set: the port speaks only TLS
  // Declared in the order they are built; shutdown() ends them in the order
  // written out above.
  std::optional<StateDirLock> lock_;
  std::string token_;
  std::unique_ptr<workers::Backend> backend_;
  std::unique_ptr<GpuInventory> gpus_;
  StoreHealth health_;
  DaemonMetrics metrics_;
  Router router_;
  std::unique_ptr<Authenticator> auth_;
  std::unique_ptr<HttpServer> server_;
  std::unique_ptr<Store> store_;
  std::unique_ptr<ClusterStore> cluster_store_;
  SystemClock clock_;
  std::unique_ptr<SeriesStore> series_store_;  // <state>/training.db: the curves
  std::unique_ptr<TrainingSeries> training_;
  std::unique_ptr<SessionStore> sessions_;
  std::unique_ptr<EventHub> events_;
  std::unique_ptr<LogFollower> follower_;
  std::unique_ptr<WorkerRegistry> registry_;
  std::unique_ptr<ClusterManager> clusters_;
};

}  // namespace muster::service
