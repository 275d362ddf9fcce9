#include "service/cluster/torchrun_mode.h"

#include <algorithm>

#include "api/base/worker_env.h"
#include "api/kernel.h"
#include "clusterspec/cluster_spec.h"
#include "clusterspec/names.h"
#include "clusterspec/shell.h"
#include "clusterspec/spec_error.h"
#include "clusterspec/torchrun.h"
#include "service/cluster/tasks.h"
#include "service/cluster/mpi_mode.h"

namespace muster::service {

using api::WorkerStatus;

api::Result<Plan> TorchrunMode::plan(const std::string& id, const api::ClusterRequest& request) {
  auto r = task_launch_request(request, {request.n_workers, request.worker_script, request.args, "worker_script",
                                         options_.project_dir});
  if (!r) return r.status();
  Plan plan;
  plan.script_path = r->script_path;
  plan.batches.push_back({clusterspec::kWorker, task_batch(id, std::move(r).value(), true, true)});
  return plan;
}

bool TorchrunMode::may_end(const api::ClusterTask& /*task*/, const api::Worker& w) const {
  return w.status == WorkerStatus::kSucceeded;  // this node's processes are done; the others may still run
}

api::Result<Wiring> TorchrunMode::wire(const api::Cluster& c, const std::vector<api::Worker>& workers) {
  const api::ClusterRequest& r = c.request;
  clusterspec::TorchrunWorld world;
  world.nnodes = static_cast<int>(c.tasks.size());
  world.nproc_per_node = r.nproc_per_node;
  world.master_addr = workers.front().ip_address;
  world.master_port = workers.front().port.value_or(0);
  world.run_id = c.id;
  world.max_restarts = r.max_restarts;

  if (c.script_path.empty()) return api::internal_error("cluster " + c.id + ": its plan resolved no worker script");
  Wiring wiring;
  try {
    // The line torchrun would be given on every node: a Python script is
    // torchrun's default, anything else (an executable) needs --no_python.
    clusterspec::TorchrunLine line;
    line.world = world;
    line.command = rank_command(c.script_path, r.args);
    if (line.command.front() == api::kPython3Program) {
      line.command.erase(line.command.begin(), std::find(line.command.begin(), line.command.end(),
                                                         c.script_path.string()));
    } else {
      line.no_python = true;
    }
    wiring.torchrun_argv = clusterspec::torchrun_argv(line);

    for (const auto& t : c.tasks) {
      Release release;
      if (r.nproc_per_node == 1) {
        release.env = clusterspec::rank_environment(world, t.index, 0);
      } else {
        release.env = clusterspec::node_environment(world, t.index);
        for (int local = 0; local < r.nproc_per_node; ++local) {
          auto env = clusterspec::rank_environment(world, t.index, local);
          std::map<std::string, std::string> own;
          for (const char* name : {"RANK", "LOCAL_RANK", "ROLE_RANK"}) own[name] = env.at(name);
          release.processes.push_back(std::move(own));
        }
      }
      if (r.env.count("OMP_NUM_THREADS")) release.env.erase("OMP_NUM_THREADS");
      // gloo, NCCL and muster's TCP transport listen on the interface of the
      // address the worker registered (its hostname may resolve to loopback).
      release.interface_env = {"GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME", base::kEnvCommTcpInterface};
      release.env[base::kEnvTaskType] = t.type;
      release.env[base::kEnvTaskIndex] = std::to_string(t.index);
      wiring.releases.emplace_back(t.worker_id, std::move(release));
    }
  } catch (const clusterspec::SpecError& e) {
    return api::invalid_argument(std::string("cannot build torchrun's environment: ") + e.what());
  }
  wiring.summary = "releasing " + std::to_string(world.nnodes * world.nproc_per_node) + " ranks with MASTER_ADDR " +
                   clusterspec::format_address(world.master_addr, world.master_port) + ", as " +
                   clusterspec::join_for_shell(wiring.torchrun_argv);
  return wiring;
}

std::optional<Verdict> TorchrunMode::verdict(const api::Cluster& /*cluster*/,
                                                   const std::vector<api::Worker>& workers,
                                                   std::optional<int> /*launcher_exit: no launcher*/) const {
  for (const auto& w : workers) {
    if (w.status != WorkerStatus::kSucceeded) return std::nullopt;
  }
  return Verdict{api::ClusterStatus::kSucceeded, ""};
}

LogSource TorchrunMode::log(const api::Cluster& c) const {
  LogSource source;
  if (!c.tasks.empty()) source.worker_id = c.tasks.front().worker_id;
  return source;
}

}  // namespace muster::service
