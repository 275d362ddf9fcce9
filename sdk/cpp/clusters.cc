// Client's cluster helpers: await_cluster, run_cluster, horovodrun, torchrun.
//
// The daemon builds the ClusterSpec / command lines and fails the cluster
// when a task fails; these only wait and turn a failed cluster into a
// ClusterFailed naming the first task that failed (tasks stopped because of
// it are skipped), with its exit code and log tail.
#include <algorithm>
#include <chrono>
#include <thread>

#include "sdk/cpp/client.h"

namespace muster::sdk {

Cluster Client::await_cluster(const std::string& id, double timeout_seconds, bool wait_for_completion) {
  using clock = std::chrono::steady_clock;
  const auto start = clock::now();
  auto interval = std::chrono::milliseconds(20);
  for (;;) {
    Cluster c = get_cluster(id);
    if (c.ended() || (!wait_for_completion && c.status != "starting")) return c;
    const double elapsed = std::chrono::duration<double>(clock::now() - start).count();
    if (timeout_seconds > 0 && elapsed >= timeout_seconds)
      throw MusterError("deadline_exceeded", "cluster " + id + " is still \"" + c.status + "\" after " +
                                                 std::to_string(timeout_seconds) + " s");
    std::this_thread::sleep_for(interval);
    interval = std::min(interval * 2, std::chrono::milliseconds(250));
  }
}

void Client::throw_cluster_failed(const Cluster& cluster) {
  std::string message = "cluster " + cluster.id + " " + cluster.status;
  if (!cluster.reason.empty()) message += ": " + cluster.reason;
  for (const auto& [type, ids] : cluster.workers) {
    for (size_t index = 0; index < ids.size(); ++index) {
      Worker w;
      try {
        w = get_worker(ids[index]);
      } catch (const MusterError&) {
        continue;
      }
      if (w.status != "failed" && w.status != "timedout" && w.status != "lost") continue;
      std::string task = type + ":" + std::to_string(index);
      message += "\ntask " + task + " (worker " + w.id + ") " + w.status;
      if (w.exit_code) message += " with exit code " + std::to_string(*w.exit_code);
      if (!w.reason.empty()) message += ": " + w.reason;
      try {
        std::string tail = worker_logs(w.id, 5);
        if (!tail.empty()) message += "\n--- last lines of its log ---\n" + tail;
      } catch (const MusterError&) {
      }
      throw ClusterFailed(message, cluster.id, task);
    }
  }
  throw ClusterFailed(message, cluster.id, "");
}

RunClusterResult Client::run_cluster(ClusterOptions opts, double completion_timeout_seconds) {
  Cluster c = create_cluster(opts);
  c = await_cluster(c.id, opts.timeout_seconds, /*wait_for_completion=*/false);
  if (c.status == "failed" || c.status == "stopped") throw_cluster_failed(c);
  if (!opts.worker_script.empty()) {
    c = await_cluster(c.id, completion_timeout_seconds, /*wait_for_completion=*/true);
    if (c.status != "succeeded") throw_cluster_failed(c);
  }
  RunClusterResult r;
  r.cluster_spec = c.cluster_spec;
  r.session_addr = session_address(c.cluster_spec);
  r.cluster = std::move(c);
  return r;
}

Cluster Client::horovodrun(int n, const std::string& script, int slots, ClusterOptions base,
                           bool wait_for_completion) {
  base.mode = "mpi";
  base.n_workers = n;
  base.slots = slots;
  base.worker_script = script;
  Cluster c = create_cluster(base);
  c = await_cluster(c.id, base.timeout_seconds, /*wait_for_completion=*/false);
  if (c.status == "failed" || c.status == "stopped") throw_cluster_failed(c);
  if (wait_for_completion) {
    c = await_cluster(c.id, 0, /*wait_for_completion=*/true);
    if (c.status != "succeeded") throw_cluster_failed(c);
  }
  return c;
}

Cluster Client::horovodrun_elastic(int n, const std::string& script, ClusterOptions base, bool wait_for_completion) {
  base.mode = "elastic";
  base.n_workers = n;
  base.slots = 1;
  base.worker_script = script;
  Cluster c = create_cluster(base);
  c = await_cluster(c.id, base.timeout_seconds, /*wait_for_completion=*/false);
  if (c.status == "failed" || c.status == "stopped") throw_cluster_failed(c);
  if (wait_for_completion) {
    c = await_cluster(c.id, 0, /*wait_for_completion=*/true);
    if (c.status != "succeeded") throw_cluster_failed(c);
  }
  return c;
}

Cluster Client::torchrun(int n, const std::string& script, int nproc_per_node, ClusterOptions base,
                         bool wait_for_completion) {
  base.mode = "torchrun";
  base.n_workers = n;
  base.nproc_per_node = nproc_per_node;
  base.worker_script = script;
  Cluster c = create_cluster(base);
  c = await_cluster(c.id, base.timeout_seconds, /*wait_for_completion=*/false);
  if (c.status == "failed" || c.status == "stopped") throw_cluster_failed(c);
  if (wait_for_completion) {
    c = await_cluster(c.id, 0, /*wait_for_completion=*/true);
    if (c.status != "succeeded") throw_cluster_failed(c);
  }
  return c;
}

}  // namespace muster::sdk
