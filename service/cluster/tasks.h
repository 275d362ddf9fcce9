// Cluster tasks as worker launches: the api::LaunchRequest of a batch of
// tasks, built directly from the validated cluster request (no JSON round
// trip), with the worker API's own rules for the script.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "api/cluster.h"
#include "api/status.h"
#include "api/worker.h"
#include "service/registry/registry.h"

namespace muster::service {

// What a task runs when it has nothing else to do: wait to be stopped.
extern const char* const kWaitCode;

struct TaskLaunchOptions {
  int n = 1;
  std::string script;                // "" : kWaitCode
  std::vector<std::string> args;
  std::string field;                 // names the script in errors ("worker_script", "ps_script")
  std::filesystem::path project_dir;
  // `script` as already resolved (by this plan, or the cluster's plan for a
  // replacement: api::Cluster::script_path); empty: resolved here.
  std::filesystem::path script_path{};
};

// `n` tasks with the request's cpu, memory, GPUs and env, the python3
// kernel, and the script resolved inside the project directory exactly as
// for POST /workers (resolve_script, service/script_path.h): invalid_argument
// naming `field`. Given options.script_path, the script is not resolved again.
api::Result<api::LaunchRequest> task_launch_request(const api::ClusterRequest& request,
                                                    const TaskLaunchOptions& options);

// A batch of the cluster's tasks with one WorkerExtras each (the cluster id
// in their env; `hold` and `reserve_port` as given).
LaunchBatch task_batch(const std::string& cluster_id, api::LaunchRequest request, bool hold, bool reserve_port);

}  // namespace muster::service
