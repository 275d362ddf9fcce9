// FailedTasks: why a cluster's tasks that ended badly end it, told from
// their own logs (the rank's record or traceback: service/failure_report.h):
// which task is the root cause (the cluster's failed_rank), what the others
// then did, and whether the root cause may still be to come.
//
// Contract
// - `ended_badly` (not empty) are indexes into the cluster's tasks and
//   `workers` (every task's, in task order), in the order they ended; each
//   task's log is read from its last 200 lines, and the failed_rank carries
//   the last 20 of the root cause's.
// - torchrun: a task is a node; its rank is the node's first process's, and
//   a rank a report blames is placed on its node (a node never blames itself).
// - `waiting_for_cause`: every failure so far reads as a peer's (it names
//   one, or the root cause is a consequence itself): the manager waits for
//   the root cause a little (manager.h, kRootCauseGrace).
// - `reason` is the cluster's: "worker 1 (id 3fa9c0) failed with exit code
//   3: KeyError: 'config'; then failed: rank 0 (...)".
// Threads: any; reads the registry's log paths and the log files, so never
// call it under the manager's mutex.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "api/cluster.h"
#include "api/worker.h"
#include "service/registry/registry.h"

namespace muster::service {

struct FailedTasks {
  size_t cause = 0;              // index of the root cause's task
  api::RankFailure rank;         // the root cause, as the cluster's failed_rank
  bool waiting_for_cause = false;
  std::string reason;
};

FailedTasks read_failed_tasks(const WorkerRegistry& registry, const api::Cluster& cluster,
                              const std::vector<api::Worker>& workers, const std::vector<size_t>& ended_badly);

// Why a task that ended (or never came up) ends its cluster:
// "worker 1 (id 3fa9c0) failed with exit code 3" for task name "worker 1 (id 3fa9c0)".
std::string describe_end(const std::string& task, const api::Worker& worker);

}  // namespace muster::service
