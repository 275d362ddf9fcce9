#include "workers/slurm/job_state.h"

#include <set>

namespace muster::workers::slurm {

namespace {

std::string slurm_says(const JobInfo& job) {
  std::string s = "Slurm job " + job.job_id + " " + job.state;
  if (!job.reason.empty() && job.reason != "None") s += " (" + job.reason + ")";
  if (!job.nodes.empty()) s += " on " + job.nodes;
  return s;
}

ProcessStatus exited(const JobInfo& job, std::optional<api::WorkerStatus> outcome, const std::string& why) {
  ProcessStatus st;
  st.state = ProcessState::kExited;
  st.exit_code = job.signal ? std::optional<int>(128 + *job.signal) : job.exit_code;
  st.outcome = outcome;
  st.reason = why.empty() ? slurm_says(job) : why + ": " + slurm_says(job);
  return st;
}

}  // namespace

ProcessStatus to_process_status(const JobInfo& job) {
  static const std::set<std::string> kPending = {"PENDING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED",
                                                 "RESV_DEL_HOLD", "SPECIAL_EXIT"};
  static const std::set<std::string> kRunning = {"CONFIGURING", "RUNNING", "COMPLETING", "SUSPENDED",
                                                 "RESIZING", "SIGNALING", "STAGE_OUT", "STOPPED"};
  const std::string& s = job.state;
  if (kPending.count(s)) {
    ProcessStatus st;
    st.state = ProcessState::kPending;
    st.reason = "queued in Slurm as job " + job.job_id + " (" + (job.reason.empty() ? "no reason given" : job.reason) + ")";
    return st;
  }
  if (kRunning.count(s)) {
    ProcessStatus st;
    st.state = ProcessState::kRunning;
    return st;
  }
  if (s == "COMPLETED") return exited(job, std::nullopt, "");
  if (s == "TIMEOUT") return exited(job, api::WorkerStatus::kFailed, "Slurm ended the job at its time limit");
  if (s == "OUT_OF_MEMORY") return exited(job, api::WorkerStatus::kFailed, "the job ran out of memory");
  if (s == "CANCELLED") return exited(job, api::WorkerStatus::kStopped, "cancelled in Slurm (scancel)");
  if (s == "PREEMPTED") return exited(job, api::WorkerStatus::kStopped, "preempted by Slurm");
  if (s == "NODE_FAIL") {
    ProcessStatus st = exited(job, api::WorkerStatus::kLost, "the node failed");
    st.state = ProcessState::kLost;
    return st;
  }
  // FAILED, BOOT_FAIL, DEADLINE and anything newer.
  return exited(job, api::WorkerStatus::kFailed, "");
}

}  // namespace muster::workers::slurm
