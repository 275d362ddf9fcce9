// Client: the C++ SDK, the same calls as the Python SDK (and cdsw), typed.
//
// Contract
// - One Client talks to one musterd (URL + bearer token, see config.h).
// - Every call is synchronous and throws MusterError (error.h) on any error,
//   carrying the daemon's code/message/field; a Client holds no connection
//   between calls, so one Client may be used from several threads.
// - await_workers waits in the daemon (one long HTTP request); await_cluster
//   polls GET /api/v1/clusters/{id} because the daemon has no cluster await.
//
// Example:
//   muster::sdk::Client client = muster::sdk::Client::from_environment();
//   muster::sdk::LaunchOptions opts;
//   opts.n = 4; opts.cpu = 0.5; opts.memory = 1; opts.script = "train.py";
//   auto workers = client.launch_workers(opts);
//   auto up = client.await_workers(muster::sdk::ids_of(workers), {false, 60});
//   for (const auto& w : up.workers) std::cout << w.ip_address << "\n";
//   client.stop_workers(muster::sdk::ids_of(workers));
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "sdk/cpp/config.h"
#include "sdk/cpp/error.h"
#include "sdk/cpp/types.h"

namespace muster::sdk {

// One answer of musterd, as a response observer sees it.
struct Exchange {
  std::string method;          // "GET", "POST"
  std::string path_and_query;  // "/api/v1/workers/3fa9c0d1e2/logs?tail=5"
  int status = 0;
  std::string content_type;
  std::string body;
};

// How follow_worker_logs / follow_cluster_logs start and how hard they retry.
struct FollowOptions {
  std::optional<int> tail;               // start with the last N lines
  std::optional<std::uint64_t> offset;   // start at this byte of the log (wins over tail)
  bool from_start = false;               // start at the first byte; none of the three: the daemon's last lines
  double read_timeout_seconds = 30;      // a quiet connection is re-opened after this long
  int retries = 20;                      // failed connections in a row before MusterError("unavailable")
  double poll_seconds = 0.25;            // a daemon that does not stream is polled this often
};

// Called with each line (without its newline) as it is written; return false to stop following.
using LineCallback = std::function<bool(const std::string& line)>;

struct ClientOptions {
  std::string url;     // empty: discover (MUSTER_URL, state dir)
  std::string token;   // empty: discover (MUSTER_TOKEN, state dir)
  double request_timeout_seconds = 30;  // every call but the awaits
  // https: verify with this PEM CA file and/or pin this SHA-256 of the
  // certificate (empty: discover, config.h). Example:
  //   muster::sdk::Client c({"https://10.0.0.5:7878", token, 30, "", "3f1c..."});
  std::string ca_file{};
  std::string tls_fingerprint{};
};

class Client {
 public:
  explicit Client(ClientOptions options = {});
  // A Client for the discovered daemon (see config.h).
  static Client from_environment() { return Client(ClientOptions{}); }

  const std::string& url() const { return endpoint_.url; }

  // `observer` is called with every answer received (2xx or not), on the
  // calling thread, before the call returns or throws: for logging, tracing
  // and the tests that check answers against api/openapi.yaml. Set it before
  // sharing the Client between threads. Example:
  //   client.set_response_observer([](const Exchange& e) { std::clog << e.status << " " << e.path_and_query; });
  void set_response_observer(std::function<void(const Exchange&)> observer) { on_response_ = std::move(observer); }

  // ---- workers ----
  // Launches opts.n workers; all or nothing. Example:
  //   LaunchOptions o; o.n = 2; o.script = "train.py";
  //   auto ws = client.launch_workers(o);
  std::vector<Worker> launch_workers(const LaunchOptions& opts);
  // The same, with the daemon's notes (e.g. script given with code: the
  // script runs, as in cdsw). Example:
  //   auto r = client.launch(o); for (auto& w : r.warnings) std::cerr << w << "\n";
  LaunchResult launch(const LaunchOptions& opts);
  // Waits in the daemon; see AwaitOptions. Example:
  //   auto r = client.await_workers(ids_of(ws), {/*wait_for_completion=*/false, 60});
  AwaitResult await_workers(const std::vector<std::string>& ids, const AwaitOptions& opts = {});
  // Stops these workers (their process trees); an empty list stops nothing
  // (no request is sent). Example: client.stop_workers(ids_of(ws));
  std::vector<Worker> stop_workers(const std::vector<std::string>& ids);
  // Stops every worker of this daemon. Example: client.stop_all_workers();
  std::vector<Worker> stop_all_workers();
  // Every worker the daemon knows, in launch order (every page of the list).
  // Example: for (auto& w : client.list_workers()) ...
  std::vector<Worker> list_workers();
  // One worker. Example: client.get_worker(ws[0].id).status
  Worker get_worker(const std::string& id);
  // Combined stdout/stderr from the end: the last `tail` lines (default: the
  // daemon's 1000), after a "[muster] ..." line when earlier output is left
  // out; from_start: the whole log file. Example: client.worker_logs(id, 20)
  std::string worker_logs(const std::string& id, std::optional<int> tail = std::nullopt, bool from_start = false);
  // Follows the worker's log (GET .../logs?follow=true): on_line gets each
  // line within a second of the worker writing it, until the worker has
  // ended (the last partial line too) or on_line returns false. Reconnects
  // from the byte offset reached if the connection drops. Returns that
  // offset. Example:
  //   client.follow_worker_logs(id, [](const std::string& l) { std::cout << l << "\n"; return true; });
  std::uint64_t follow_worker_logs(const std::string& id, const LineCallback& on_line, const FollowOptions& opts = {});

  // ---- clusters ----
  // POST /api/v1/clusters as is; returns at once (status "starting"). Example:
  //   ClusterOptions o; o.mode = "mpi"; o.n_workers = 2; o.worker_script = "t.py";
  //   auto c = client.create_cluster(o);
  Cluster create_cluster(const ClusterOptions& opts);
  Cluster get_cluster(const std::string& id);
  std::vector<Cluster> list_clusters();
  // Stops the cluster's tasks and launcher. Example: client.stop_cluster(c.id);
  Cluster stop_cluster(const std::string& id);
  // The cluster's output as text: mpi mode, the launcher's (mpirun's combined)
  // log; ps mode, the chief's (worker 0's). Empty while there is none yet;
  // from the end as worker_logs. Example: std::cout << client.cluster_logs(c.id, 20);
  std::string cluster_logs(const std::string& id, std::optional<int> tail = std::nullopt, bool from_start = false);
  // follow_worker_logs for a cluster's log, until the cluster has ended.
  std::uint64_t follow_cluster_logs(const std::string& id, const LineCallback& on_line,
                                    const FollowOptions& opts = {});
  // Until the cluster ended (or, wait_for_completion=false, is up); never
  // throws for a failed cluster, throws MusterError("deadline_exceeded") after
  // timeout_seconds (0: no limit). Example: client.await_cluster(c.id, 600);
  Cluster await_cluster(const std::string& id, double timeout_seconds = 60, bool wait_for_completion = true);
  // ps mode as Cloudera's run_cluster: with no worker_script returns once
  // every task is up; with one, waits for the end and throws ClusterFailed
  // naming the failing task. Example:
  //   ClusterOptions o; o.n_workers = 2; o.n_ps = 1; o.worker_script = "train.py";
  //   auto r = client.run_cluster(o);  // r.cluster_spec, r.session_addr
  RunClusterResult run_cluster(ClusterOptions opts, double completion_timeout_seconds = 0);
  // mpi mode: n workers with `slots` each; returns once up (commands known),
  // or with wait_for_completion at the end (ClusterFailed if it failed). Example:
  //   auto c = client.horovodrun(2, "train.py"); std::cout << c.horovodrun_command;
  Cluster horovodrun(int n, const std::string& script, int slots = 1, ClusterOptions base = {},
                     bool wait_for_completion = false);
  // elastic mode (horovodrun's elastic flags in `base`: min_np, max_np,
  // reset_limit, blacklist_cooldown_range): musterd launches n ranks itself
  // and re-forms their world when one is lost. Example:
  //   muster::sdk::ClusterOptions o; o.min_np = 2; o.max_np = 3;
  //   auto c = client.horovodrun_elastic(3, "train.py", o, true);
  //   for (const auto& g : c.generations) std::cout << g.generation << " " << g.end_reason << "\n";
  Cluster horovodrun_elastic(int n, const std::string& script, ClusterOptions base = {},
                             bool wait_for_completion = false);
  // torchrun mode: n workers of nproc_per_node processes, each with
  // torchrun's environment (RANK, WORLD_SIZE, MASTER_ADDR, ...); returns once
  // they run (torchrun_command known), or with wait_for_completion at the
  // end (ClusterFailed naming the worker and its ranks if it failed). Example:
  //   auto c = client.torchrun(2, "ddp_train.py"); std::cout << c.torchrun_command;
  Cluster torchrun(int n, const std::string& script, int nproc_per_node = 1, ClusterOptions base = {},
                   bool wait_for_completion = false);

 private:
  struct Answer {
    int status = 0;
    std::string body;
    std::optional<std::uint64_t> log_offset;  // X-Log-Offset of a logs answer
    std::size_t marker_bytes = 0;             // X-Log-Marker-Bytes: the body's leading "[muster] ..." line
  };
  // Sends one request; throws MusterError for transport errors and non-2xx.
  // timeout_seconds <= 0 waits as long as it takes.
  Answer send(const std::string& method, const std::string& path_and_query, const nlohmann::json* body,
              double timeout_seconds);
  nlohmann::json send_json(const std::string& method, const std::string& path, const nlohmann::json* body,
                           double timeout_seconds);
  [[noreturn]] void throw_cluster_failed(const Cluster& cluster);
  // follow.cc: the loop behind both follow calls.
  std::uint64_t follow_log(const std::string& path, const std::function<bool()>& is_done,
                           const LineCallback& on_line, const FollowOptions& opts);

  Endpoint endpoint_;
  double request_timeout_seconds_;
  std::function<void(const Exchange&)> on_response_;
};

// Turns an HTTP error answer into a MusterError (exposed for tests).
MusterError error_from_response(int http_status, const std::string& body);

}  // namespace muster::sdk
