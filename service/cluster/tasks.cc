#include "service/cluster/tasks.h"

#include "api/base/worker_env.h"
#include "service/script_path.h"

namespace muster::service {

const char* const kWaitCode = "import time\nwhile True:\n    time.sleep(3600)\n";

api::Result<api::LaunchRequest> task_launch_request(const api::ClusterRequest& request,
                                                    const TaskLaunchOptions& options) {
  api::LaunchRequest r;
  r.n = options.n;
  r.cpu = request.cpu;
  r.memory = request.memory;
  r.nvidia_gpu = request.nvidia_gpu;
  r.kernel = api::kKernelPython3;
  r.env = request.env;
  r.python = request.python;
  if (options.script.empty()) {
    r.code = kWaitCode;
    return r;
  }
  r.script = options.script;
  r.script_path = options.script_path;
  if (r.script_path.empty()) {
    auto path = resolve_script(options.project_dir, options.script);
    if (!path) return api::invalid_argument(path.status().message(), options.field);
    r.script_path = path.value();
  }
  r.args = options.args;
  return r;
}

LaunchBatch task_batch(const std::string& cluster_id, api::LaunchRequest request, bool hold, bool reserve_port) {
  LaunchBatch batch;
  batch.cluster_id = cluster_id;
  batch.per_worker.assign(static_cast<size_t>(request.n), WorkerExtras{{}, hold, reserve_port});
  // The one place a task learns its cluster: every mode's workers, and their
  // replacements, are launched through here.
  for (auto& extras : batch.per_worker) extras.env[base::kEnvClusterId] = cluster_id;
  batch.request = std::move(request);
  return batch;
}

}  // namespace muster::service
