// PsMode: the ps mode of clusters (TensorFlow's parameter-server
// strategy, muster-ps), behind the ClusterMode interface (mode.h).
//
//   a) plan: n_ps PS tasks, n_chief chief, n_workers worker and n_evaluator
//      evaluator tasks (the last three run the worker script), each held and
//      reserving a port: its agent registers ip:port and waits to be
//      released. PS tasks run `muster-ps` when no ps_script is given and the
//      program exists, else wait to be stopped; they get no GPU.
//   b) wire, once every task registered with its port: the ClusterSpec
//      ({"ps": [...], "chief": [...], "worker": [...]}, index = launch order;
//      the evaluator stays outside, TensorFlow's rule) and one release per
//      task: TF_CONFIG with its own task type/index, cluster.json in its
//      working dir, the cluster's secret for the PS (never stored or shown).
//   c) verdict: with a chief, once the chief succeeded (TensorFlow 2's
//      workers and PS serve until stopped); without one, once every worker
//      task succeeded. A worker task that succeeded may end early.
//   d) log: the chief's (else worker 0's) worker log.
//   Under max_restarts a failed worker task that is not the chief is
//   replaced alone, released with its own TF_CONFIG (replaceable()); a PS
//   task or the chief failing restarts every task, the chief resuming from
//   the PS checkpoint.
#pragma once

#include <filesystem>

#include "service/cluster/mode.h"

namespace muster::service {

struct PsModeOptions {
  std::filesystem::path project_dir;  // canonical: scripts resolve inside it
  std::filesystem::path ps_program;   // muster-ps; PS tasks run it when it exists
};

class PsMode final : public ClusterMode {
 public:
  explicit PsMode(PsModeOptions options) : options_(std::move(options)) {}

  api::Result<Plan> plan(const std::string& cluster_id, const api::ClusterRequest& request) override;
  // Reachable, and its reserved port registered with it.
  bool ready(const api::Worker& worker) const override { return api::is_reachable(worker) && worker.port.has_value(); }
  bool may_end(const api::ClusterTask& task, const api::Worker& worker) const override;
  api::Result<Wiring> wire(const api::Cluster& cluster, const std::vector<api::Worker>& workers) override;
  std::optional<Verdict> verdict(const api::Cluster& cluster, const std::vector<api::Worker>& workers,
                                 std::optional<int> launcher_exit) const override;
  LogSource log(const api::Cluster& cluster) const override;
  // A worker task that is not the chief (worker 0 without a chief task):
  // replaced alone, with its TF_CONFIG, under max_restarts.
  bool replaceable(const api::Cluster& cluster, const api::ClusterTask& task) const override;

 private:
  PsModeOptions options_;
};

}  // namespace muster::service
