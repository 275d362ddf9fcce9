// FakeSlurm: a Slurm behind the backend's SlurmClient seam
// (workers/slurm/slurm_client.h), for the backend's unit tests
// (slurm_backend_test, backend_contract_test). It remembers what was
// submitted and cancelled; tests set the job states and nodes in the
// Shared state, which outlives a backend (a restarted daemon finds the same
// Slurm). A new job is PENDING (Priority), numbered from 100. The
// `fail_submit_at`-th submission (0-based) and those of the job names in
// `refuse_names` fail as sbatch does.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "workers/slurm/slurm_client.h"

namespace muster::testing {

class FakeSlurm final : public workers::slurm::SlurmClient {
 public:
  struct Shared {
    std::mutex mu;
    std::vector<workers::slurm::JobSpec> submitted;
    std::vector<std::string> cancelled;
    std::map<std::string, workers::slurm::JobInfo> jobs;
    std::map<std::string, workers::slurm::NodeInfo> nodes;
    int fail_submit_at = -1;             // the n-th submit (0-based) fails
    std::set<std::string> refuse_names;  // job names (muster-<worker id>) whose submit fails
    int next_id = 100;
  };
  explicit FakeSlurm(std::shared_ptr<Shared> s) : s_(std::move(s)) {}
  api::Result<std::string> submit(const workers::slurm::JobSpec& spec) override {
    std::lock_guard<std::mutex> lock(s_->mu);
    if (static_cast<int>(s_->submitted.size()) == s_->fail_submit_at || s_->refuse_names.count(spec.name)) {
      return api::unavailable("sbatch failed (exit 1): Invalid partition name specified");
    }
    s_->submitted.push_back(spec);
    const std::string id = std::to_string(s_->next_id++);
    s_->jobs[id] = {id, "PENDING", "Priority", "", 0, std::nullopt};
    return id;
  }
  api::Status cancel(const std::string& id) override {
    std::lock_guard<std::mutex> lock(s_->mu);
    s_->cancelled.push_back(id);
    if (s_->jobs.count(id)) s_->jobs[id].state = "CANCELLED";
    return api::Status::ok();
  }
  api::Result<std::map<std::string, workers::slurm::JobInfo>> query(const std::vector<std::string>& ids) override {
    std::lock_guard<std::mutex> lock(s_->mu);
    std::map<std::string, workers::slurm::JobInfo> out;
    for (const auto& id : ids) {
      if (s_->jobs.count(id)) out[id] = s_->jobs[id];
    }
    return out;
  }
  api::Result<std::map<std::string, workers::slurm::NodeInfo>> nodes() override {
    std::lock_guard<std::mutex> lock(s_->mu);
    return s_->nodes;
  }

 private:
  std::shared_ptr<Shared> s_;
};

}  // namespace muster::testing
