#include "service/cluster/ps_mode.h"

#include <algorithm>

#include "api/base/worker_env.h"
#include "clusterspec/cluster_spec.h"
#include "clusterspec/names.h"
#include "clusterspec/spec_error.h"
#include "clusterspec/tf_config.h"
#include "service/random_hex.h"
#include "service/cluster/tasks.h"

namespace muster::service {

namespace fs = std::filesystem;
using api::WorkerStatus;

api::Result<Plan> PsMode::plan(const std::string& id, const api::ClusterRequest& request) {
  Plan plan;
  std::vector<TaskBatch>& batches = plan.batches;
  if (request.n_ps > 0) {
    auto ps = task_launch_request(request, {request.n_ps, request.ps_script, {}, "ps_script", options_.project_dir});
    if (!ps) return ps.status();
    ps->nvidia_gpu = 0;  // parameter servers keep variables in host memory: no GPU for them
    std::error_code ec;
    if (request.ps_script.empty() && !options_.ps_program.empty() && fs::is_regular_file(options_.ps_program, ec)) {
      // The runtime's parameter server, outside the project dir: built by
      // the daemon itself, so it skips the script validation.
      ps->code.clear();
      ps->kernel = api::kKernelExecutable;
      ps->script = options_.ps_program.filename().string();
      ps->script_path = options_.ps_program;
    }
    batches.push_back({clusterspec::kPs, task_batch(id, std::move(ps).value(), true, true)});
  }
  // TensorFlow 2's roles run the worker script too (each learns its role
  // from TF_CONFIG): the chief (coordinator) and the evaluator.
  const std::pair<int, const char*> roles[] = {{request.n_chief, clusterspec::kChief},
                                               {request.n_workers, clusterspec::kWorker},
                                               {request.n_evaluator, clusterspec::kEvaluator}};
  for (const auto& [n, type] : roles) {
    if (n == 0) continue;
    auto r = task_launch_request(request, {n, request.worker_script, request.args, "worker_script",
                                           options_.project_dir, plan.script_path});
    if (!r) return r.status();
    plan.script_path = r->script_path;  // resolved once, for every role
    batches.push_back({type, task_batch(id, std::move(r).value(), true, true)});
  }
  return plan;
}

bool PsMode::may_end(const api::ClusterTask& /*task*/, const api::Worker& w) const {
  // A worker task that succeeded is done; a PS task that exits 0 is let be
  // (the workers decide).
  return w.status == WorkerStatus::kSucceeded;
}

api::Result<Wiring> PsMode::wire(const api::Cluster& c, const std::vector<api::Worker>& workers) {
  clusterspec::ClusterSpec spec;
  try {
    // TensorFlow's rule: the evaluator is not part of the cluster.
    for (size_t i = 0; i < c.tasks.size(); ++i) {
      if (c.tasks[i].type == clusterspec::kEvaluator) continue;
      spec.add_task(c.tasks[i].type, clusterspec::format_address(workers[i].ip_address, *workers[i].port));
    }
    if (auto error = spec.validate()) return api::internal_error(*error);
  } catch (const clusterspec::SpecError& e) {
    return api::internal_error(std::string("cannot build the ClusterSpec: ") + e.what());
  }
  Wiring wiring;
  wiring.cluster_spec = spec.to_json();
  wiring.summary = "releasing every task with ClusterSpec " + spec.dump();
  // Every task gets its own TF_CONFIG and the cluster's secret (the ps tasks
  // serve only clients presenting it; it is never stored or shown).
  const std::string secret = random_hex(32);
  for (const auto& t : c.tasks) {
    clusterspec::TfConfig config;
    config.cluster = spec;
    config.task_type = t.type;
    config.task_index = t.index;
    Release release;
    release.env["TF_CONFIG"] = config.dump();
    release.env[base::kEnvTaskType] = t.type;
    release.env[base::kEnvTaskIndex] = std::to_string(t.index);
    release.env[base::kEnvPsSecret] = secret;
    release.files["cluster.json"] = config.to_json().dump(2) + "\n";
    wiring.releases.emplace_back(t.worker_id, std::move(release));
  }
  return wiring;
}

std::optional<Verdict> PsMode::verdict(const api::Cluster& c, const std::vector<api::Worker>& workers,
                                             std::optional<int> /*launcher_exit: ps mode has none*/) const {
  // Done: with a chief, once the chief succeeded (TensorFlow 2's workers and
  // PS serve until told to stop); without one, once every worker task
  // succeeded. The rest (PS, evaluator) is then stopped.
  const bool has_chief = std::any_of(c.tasks.begin(), c.tasks.end(),
                                     [](const api::ClusterTask& t) { return t.type == clusterspec::kChief; });
  for (size_t i = 0; i < c.tasks.size(); ++i) {
    const bool decides = has_chief ? c.tasks[i].type == clusterspec::kChief : c.tasks[i].type == clusterspec::kWorker;
    if (decides && workers[i].status != WorkerStatus::kSucceeded) return std::nullopt;
  }
  return Verdict{api::ClusterStatus::kSucceeded, ""};
}

LogSource PsMode::log(const api::Cluster& c) const {
  // TensorFlow's chief: the chief task, else worker 0.
  LogSource source;
  for (const auto& t : c.tasks) {
    if (t.type == clusterspec::kChief) source.worker_id = t.worker_id;
  }
  for (const auto& t : c.tasks) {
    if (source.worker_id.empty() && t.type == clusterspec::kWorker && t.index == 0) source.worker_id = t.worker_id;
  }
  return source;
}

bool PsMode::replaceable(const api::Cluster& c, const api::ClusterTask& task) const {
  return task.type == clusterspec::kWorker && (task.index > 0 || c.request.n_chief > 0);
}

}  // namespace muster::service
