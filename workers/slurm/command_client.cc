// The real SlurmClient: Slurm's own commands with machine-readable output.
#include <chrono>
#include <cstring>

#include "api/base/run_capture.h"
#include "workers/slurm/slurm_client.h"

namespace muster::workers::slurm {

namespace {

struct Output {
  int exit_code = -1;  // 128+signal when killed; -1 when it could not start
  std::string out, err;
};

// Runs argv (looked up on PATH) with stdin /dev/null, collecting stdout and
// stderr apart (base::run_capture); kills it after `limit`.
Output run(const std::vector<std::string>& argv, std::chrono::milliseconds limit) {
  const base::Captured c = base::run_capture(argv, {limit, false});
  Output result;
  result.exit_code = c.exit_code;
  result.out = c.out;
  result.err = c.failure ? *c.failure : c.err;
  if (c.timed_out) result.err += argv[0] + " did not finish within " + std::to_string(limit.count() / 1000) + " s";
  return result;
}

std::string trimmed(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ' || s.back() == '\r')) s.pop_back();
  return s;
}

std::string failure(const std::string& what, const Output& o) {
  return what + " failed (exit " + std::to_string(o.exit_code) + "): " + trimmed(o.err.empty() ? o.out : o.err);
}

class CommandClient final : public SlurmClient {
 public:
  api::Result<std::string> submit(const JobSpec& spec) override {
    const Output o = run(sbatch_argv(spec), kLimit);
    if (o.exit_code != 0) return api::unavailable(failure("sbatch", o));
    // --parsable prints "<job id>" or "<job id>;<cluster>".
    std::string id = trimmed(o.out);
    id = id.substr(0, id.find(';'));
    if (id.empty() || id.find_first_not_of("0123456789") != std::string::npos) {
      return api::unavailable("sbatch printed no job id: '" + trimmed(o.out) + "'");
    }
    return id;
  }

  api::Status cancel(const std::string& job_id) override {
    const Output o = run({"scancel", job_id}, kLimit);
    // scancel of a job that already ended prints an error and exits non-zero.
    if (o.exit_code != 0 && o.err.find("already completed") == std::string::npos &&
        o.err.find("Invalid job id") == std::string::npos) {
      return api::unavailable(failure("scancel " + job_id, o));
    }
    return api::Status::ok();
  }

  api::Result<std::map<std::string, JobInfo>> query(const std::vector<std::string>& job_ids) override {
    if (job_ids.empty()) return std::map<std::string, JobInfo>{};
    std::string list;
    for (const auto& id : job_ids) list += (list.empty() ? "" : ",") + id;
    const Output o = run({"squeue", "--json", "--states=all", "--jobs=" + list}, kLimit);
    // squeue exits non-zero when none of the ids is known any more.
    if (o.exit_code != 0) {
      if (o.err.find("Invalid job id") != std::string::npos) return std::map<std::string, JobInfo>{};
      return api::unavailable(failure("squeue", o));
    }
    return parse_squeue_json(o.out);
  }

  api::Result<std::map<std::string, NodeInfo>> nodes() override {
    const Output o = run({"sinfo", "--json"}, kLimit);
    if (o.exit_code != 0) return api::unavailable(failure("sinfo", o));
    return parse_sinfo_nodes_json(o.out);
  }

 private:
  static constexpr std::chrono::milliseconds kLimit{20000};
};

}  // namespace

std::unique_ptr<SlurmClient> make_command_client() { return std::make_unique<CommandClient>(); }

}  // namespace muster::workers::slurm
