// muster-ps: one parameter-server task. Reads TF_CONFIG (task type "ps",
// index i), listens on the port of cluster.ps[i] and serves until every
// worker has sent DONE (exit 0), or fails with the reason (exit 1) when a
// worker is lost without backups to replace it (after --timeout-ms).
// MUSTER_PS_SECRET (set by musterd for every task of a ps cluster): only
// clients presenting it in their hello are served.
//
//   TF_CONFIG='{"cluster":{"ps":["127.0.0.1:4000"],"worker":["127.0.0.1:4100"]},
//               "task":{"type":"ps","index":0}}' muster-ps
#include <algorithm>
#include <cstdlib>
#include <iostream>
#include <thread>

#include <CLI/CLI.hpp>
#include <spdlog/spdlog.h>

#include "runtime/error.h"
#include "runtime/ps/cluster.h"
#include "runtime/ps/server.h"

int main(int argc, char** argv) {
  namespace ps = muster::runtime::ps;
  CLI::App app{"muster-ps: a parameter-server task (TensorFlow SyncReplicas semantics)"};
  std::string tf_config;
  std::string host = "0.0.0.0";
  int port = -1;
  // More io threads than connections still pays: the thread completing a
  // step answers every waiting pull while the others keep reading.
  int threads = static_cast<int>(std::min(8u, std::max(4u, std::thread::hardware_concurrency())));
  int timeout_ms = ps::default_timeout_ms();
  int max_connections = 0;
  app.add_option("--tf-config", tf_config, "TF_CONFIG JSON (default: the TF_CONFIG environment variable)");
  app.add_option("--host", host, "address to listen on (default 0.0.0.0)");
  app.add_option("--port", port, "port to listen on (default: this task's port in TF_CONFIG)");
  app.add_option("--threads", threads, "io threads");
  app.add_option("--timeout-ms", timeout_ms, "fail after waiting this long for a missing worker (env MUSTER_PS_TIMEOUT_MS)");
  app.add_option("--max-connections", max_connections,
                 "open connections at most (default: (4 + MUSTER_PS_STREAMS) x the cluster's tasks, at least 16)");
  CLI11_PARSE(app, argc, argv);

  try {
    ps::PsCluster cluster = tf_config.empty() ? ps::PsCluster::from_env() : ps::PsCluster::from_tf_config(tf_config);
    if (cluster.task_type != "ps") {
      throw muster::runtime::InvalidArgument("TF_CONFIG: task type is \"" + cluster.task_type + "\"; muster-ps runs \"ps\" tasks");
    }
    std::string own_host;
    unsigned short own_port = 0;
    ps::split_address(cluster.ps.at(static_cast<std::size_t>(cluster.task_index)), &own_host, &own_port);
    ps::ServerOptions opt;
    opt.host = host;
    opt.port = port >= 0 ? static_cast<unsigned short>(port) : own_port;
    opt.task_index = cluster.task_index;
    opt.threads = threads;
    opt.timeout_ms = timeout_ms;
    const int tasks = cluster.num_workers() + static_cast<int>(cluster.ps.size());
    // Each worker opens MUSTER_PS_STREAMS connections; room for as many again
    // (reconnects, evaluators, probes). Secret: MUSTER_PS_SECRET.
    const int streams = std::max(ps::default_streams(), ps::kDefaultStreams);
    opt.max_connections = max_connections > 0 ? max_connections : std::max(16, (4 + streams) * tasks);
    ps::PsServer server(opt);
    server.start();
    spdlog::info("ps task {} listening on {}:{} ({} workers in the cluster)", cluster.task_index, host, server.port(),
                 cluster.num_workers());
    server.wait();
    const auto s = server.stats();
    spdlog::info("ps task {}: all workers done; {} steps applied, {} stale gradients dropped", cluster.task_index,
                 s.steps_applied, s.stale_dropped);
    return 0;
  } catch (const std::exception& e) {
    spdlog::error("muster-ps: {}", e.what());
    return 1;
  }
}
