#include "service/cluster/failed_tasks.h"

#include <algorithm>
#include <cstring>

#include "service/failure_report.h"
#include "service/log_route.h"

namespace muster::service {

using api::WorkerStatus;

std::string describe_end(const std::string& task, const api::Worker& w) {
  const std::string why = w.reason.empty() ? "" : ": " + w.reason;
  switch (w.status) {
    case WorkerStatus::kFailed:
      if (w.exit_code) return task + " failed with exit code " + std::to_string(*w.exit_code);
      return task + " failed" + why;
    case WorkerStatus::kTimedOut: return task + " timed out" + why;
    case WorkerStatus::kLost: return task + " was lost" + why;
    case WorkerStatus::kStopped: return task + " was stopped" + why;
    case WorkerStatus::kSucceeded: return task + " ended (exit code 0) while the cluster needed it";
    default: return task + " is " + api::worker_status_name(w.status);
  }
}

FailedTasks read_failed_tasks(const WorkerRegistry& registry, const api::Cluster& c,
                              const std::vector<api::Worker>& workers, const std::vector<size_t>& ended_badly) {
  constexpr size_t kReportLines = 200;
  constexpr size_t kTailLines = 20;
  // torchrun: a node's first process's RANK; the blamed peer is placed on its node.
  const int per_task = c.request.mode == api::ClusterKind::kTorchrun ? std::max(1, c.request.nproc_per_node) : 1;
  std::vector<RankReport> reports;
  std::vector<std::vector<std::string>> tails;
  for (size_t i : ended_badly) {
    std::vector<std::string> lines;
    if (auto path = registry.log_path(workers[i].id)) lines = split_lines(tail_file(path.value(), kReportLines));
    RankReport r = read_rank_report(c.tasks[i].index * per_task, lines);
    if (r.blames) r.blames = *r.blames / per_task * per_task;
    if (r.blames && *r.blames == r.rank) r.blames.reset();
    reports.push_back(std::move(r));
    if (lines.size() > kTailLines) lines.erase(lines.begin(), lines.end() - kTailLines);
    tails.push_back(std::move(lines));
  }
  const RootCause root = root_cause(reports);
  FailedTasks out;
  out.cause = ended_badly[root.index];
  out.waiting_for_cause = root.elsewhere.has_value() || reports[root.index].consequence;
  const api::Worker& w = workers[out.cause];
  api::RankFailure& f = out.rank;
  f.rank = reports[root.index].rank;
  f.host = w.ip_address;
  f.worker_id = w.id;
  f.exit_code = w.exit_code;
  if (w.exit_code && *w.exit_code > 128 && *w.exit_code < 160) {
    f.signal = *w.exit_code - 128;
    if (const char* name = ::sigdescr_np(*f.signal)) f.signal_name = name;
  }
  f.exception = reports[root.index].exception;
  f.log_tail = std::move(tails[root.index]);
  f.then_failed = then_failed_text(reports, root.index);
  out.reason = describe_end(c.task_name(c.tasks[out.cause]), w);
  if (!f.exception.empty() && out.reason.find(f.exception) == std::string::npos) out.reason += ": " + f.exception;
  if (!f.then_failed.empty()) out.reason += "; then failed: " + f.then_failed;
  return out;
}

}  // namespace muster::service
