// How a Slurm job's state becomes a worker's process state.
//
//   PENDING, REQUEUED, ...              -> kPending, reason "queued in Slurm (<reason>)"
//   CONFIGURING, RUNNING, COMPLETING, ...-> kRunning
//   COMPLETED                            -> kExited with the script's exit code
//   FAILED, BOOT_FAIL, DEADLINE          -> kExited, outcome failed
//   TIMEOUT                              -> kExited, outcome failed ("time limit")
//   OUT_OF_MEMORY                        -> kExited, outcome failed ("out of memory")
//   CANCELLED, PREEMPTED                 -> kExited, outcome stopped
//   NODE_FAIL                            -> kLost, outcome lost
// Every terminal state carries Slurm's own state name and reason in `reason`.
#pragma once

#include "workers/backend.h"
#include "workers/slurm/slurm_client.h"

namespace muster::workers::slurm {

ProcessStatus to_process_status(const JobInfo& job);

}  // namespace muster::workers::slurm
