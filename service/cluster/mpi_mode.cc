#include "service/cluster/mpi_mode.h"

#include <algorithm>
#include <fstream>
#include <iterator>
#include <tuple>

#include "api/base/atomic_file.h"
#include "api/base/worker_env.h"
#include "api/kernel.h"
#include "clusterspec/cluster_spec.h"
#include "clusterspec/launch_line.h"
#include "clusterspec/names.h"
#include "clusterspec/shell.h"
#include "clusterspec/spec_error.h"
#include "service/cluster/tasks.h"
#include "service/failure_report.h"
#include "service/cluster/mpi_output.h"
#include "service/script_path.h"

namespace muster::service {

namespace fs = std::filesystem;
using api::WorkerStatus;

namespace {

// The GPUs of an mpi cluster's ranks. mpirun maps ranks by slot over -H in
// order, so global rank g runs on a known host; every rank of a host gets
// the devices its workers reserved (in worker order) as
// CUDA_VISIBLE_DEVICES (so device `local_rank` is its own, Horovod's
// pinning), and MUSTER_GPU_DEVICE = the physical index of its local rank's
// device. Encoded for the wrapper: one entry per global rank, ';'-separated,
// each the host's comma-separated list. "" when no worker has a GPU.
std::string rank_gpus(const std::vector<clusterspec::HostSlots>& hosts, const std::vector<api::Worker>& workers) {
  bool any = false;
  std::vector<std::string> per_rank;
  for (const auto& h : hosts) {
    std::string list;
    for (const auto& w : workers) {
      if (w.ip_address != h.host || w.gpu_devices.empty()) continue;
      list += (list.empty() ? "" : ",") + w.gpu_devices;
      any = true;
    }
    per_rank.insert(per_rank.end(), static_cast<size_t>(h.slots), list);
  }
  if (!any) return "";
  std::string out;
  for (size_t i = 0; i < per_rank.size(); ++i) out += (i ? ";" : "") + per_rank[i];
  return out;
}

// Workers on one IP share a host (the local backend: one host, all slots).
std::vector<clusterspec::HostSlots> hosts_of(const std::vector<api::Worker>& workers, int slots) {
  std::vector<clusterspec::HostSlots> hosts;
  for (const auto& w : workers) {
    auto it = std::find_if(hosts.begin(), hosts.end(), [&](const auto& h) { return h.host == w.ip_address; });
    if (it == hosts.end()) {
      hosts.push_back({w.ip_address, slots});
    } else {
      it->slots += slots;
    }
  }
  return hosts;
}

}  // namespace

// Run by /bin/sh in front of each rank's command when the cluster has GPUs.
const char* const kRankGpuWrapper =
    "h=$(printf %s \"$MUSTER_RANK_GPUS\" | cut -d \\; -f $((${OMPI_COMM_WORLD_RANK:-0} + 1))); "
    "d=$(printf %s \"$h\" | cut -d , -f $((${OMPI_COMM_WORLD_LOCAL_RANK:-0} + 1))); "
    "export CUDA_VISIBLE_DEVICES=\"$h\" NVIDIA_VISIBLE_DEVICES=\"$h\" MUSTER_GPU_DEVICE=\"$d\"; exec \"$@\"";

// Run by /bin/sh in front of each launched rank's command. The command runs
// in a child (one fork; the subshell execs it) with the rank's own stderr,
// and dies with the shell (setpriv's parent-death signal, where util-linux
// has it: a shell killed alone leaves no rank behind). The shell keeps its
// own stderr on /dev/null so that it adds no "Terminated" of its own, and
// survives the signals mpirun forwards to the rank's process group (a trap,
// which exec resets for the command). An exit other than 0 is reported on
// the rank's stderr in cluster/mpi_output.h's words, and a death by signal is passed
// on as the same signal, so mpirun sees what it would have seen without the
// wrapper.
const char* const kRankExitWrapper =
    "exec 3>&2 2>/dev/null; trap : HUP INT TERM USR1 USR2; "
    "command -v setpriv >/dev/null && set -- setpriv --pdeathsig KILL -- \"$@\"; "
    "(exec \"$@\") 2>&3 3>&-; rc=$?; "
    "[ \"$rc\" -eq 0 ] && exit 0; "
    "if [ \"$rc\" -gt 128 ] && [ \"$rc\" -le 192 ]; then s=$((rc - 128)); "
    "echo \"muster: rank ${OMPI_COMM_WORLD_RANK:-?} was killed by signal $s\" >&3; "
    "trap - HUP INT TERM USR1 USR2; kill -s \"$s\" $$; fi; "
    "echo \"muster: rank ${OMPI_COMM_WORLD_RANK:-?} exited with code $rc\" >&3; exit \"$rc\"";

std::vector<std::string> rank_command(const fs::path& script_path, const std::vector<std::string>& args,
                                      const std::string& python) {
  api::KernelCommandOptions k;
  k.kernel = api::kKernelPython3;
  k.script = script_path.string();
  k.args = args;
  k.python = python;
  return api::script_command(k);
}

MpiMode::MpiMode(MpiModeOptions options, WorkerRegistry& registry, Launcher& launcher,
                             workers::MpiHosts* mpi_hosts)
    : options_(std::move(options)), registry_(registry), launcher_(launcher), mpi_hosts_(mpi_hosts) {}

fs::path MpiMode::dir_of(const std::string& id) const { return options_.state_dir / "clusters" / id; }

api::Result<Plan> MpiMode::plan(const std::string& id, const api::ClusterRequest& request) {
  // The rank command is the worker script itself: it must resolve now.
  auto script = resolve_script(options_.project_dir, request.worker_script);
  if (!script) return api::invalid_argument(script.status().message(), "worker_script");
  Plan plan;
  plan.script_path = std::move(script).value();
  std::vector<TaskBatch>& batches = plan.batches;
  if (!request.workers.empty()) {
    // The notebook's own workers host the ranks: each must be up now.
    for (const auto& wid : request.workers) {
      auto w = registry_.get(wid);
      if (!w) return api::invalid_argument("workers: no worker '" + wid + "'", "workers");
      if (!ready(w.value())) {
        return api::invalid_argument("workers: worker " + wid + " is " + api::worker_status_name(w->status) +
                                         (w->reason.empty() ? "" : " (" + w->reason + ")") +
                                         ", not running with an IP address; await_workers(..., "
                                         "wait_for_completion=False) before starting ranks on it",
                                     "workers");
      }
    }
    batches.push_back({clusterspec::kWorker, {}, request.workers});
    return plan;
  }
  auto idle = task_launch_request(request, {request.n_workers, "", {}, "worker_script", options_.project_dir});
  if (!idle) return idle.status();
  batches.push_back({clusterspec::kWorker, task_batch(id, std::move(idle).value(), false, false)});
  return plan;
}

bool MpiMode::may_end(const api::ClusterTask& /*task*/, const api::Worker& /*worker*/) const {
  return false;  // every worker hosts ranks: it must stay up
}

api::Result<Wiring> MpiMode::wire(const api::Cluster& c, const std::vector<api::Worker>& workers) {
  const api::ClusterRequest& r = c.request;
  const std::vector<clusterspec::HostSlots> hosts = hosts_of(workers, r.slots);
  if (c.script_path.empty()) return api::internal_error("cluster " + c.id + ": its plan resolved no worker script");

  clusterspec::HorovodrunOptions h;
  h.hosts = hosts;
  h.ssh_port = r.ssh_port;
  h.network_interfaces = r.network_interfaces;
  h.fusion_threshold_mb = r.fusion_threshold_mb;
  h.cycle_time_ms = r.cycle_time_ms;
  h.timeline_filename = r.timeline_filename;
  h.start_timeout_s = r.start_timeout;
  h.verbose = r.verbose;
  h.command = rank_command(c.script_path, r.args, r.python);
  // Preflight: every host is checked before mpirun starts; what the backend
  // answers goes on the line, explicitly.
  workers::MpiLaunchSettings found;
  if (mpi_hosts_) {
    workers::MpiHostsRequest q;
    for (const auto& hs : hosts) q.hosts.push_back(hs.host);
    q.ssh_port = r.ssh_port;
    q.program = h.command.front();
    auto preflight = mpi_hosts_->preflight_mpi(q);
    if (!preflight) return api::Status(preflight.status().code(), "preflight failed: " + preflight.status().message());
    found = std::move(preflight).value();
  }
  if (h.network_interfaces.empty()) h.network_interfaces = found.network_interfaces;

  Wiring wiring;
  std::vector<std::string> launched;
  try {
    wiring.horovodrun_argv = clusterspec::horovodrun_argv(h);
    clusterspec::MpirunOptions m = clusterspec::mpirun_options_for(h);
    m.program = options_.mpirun;
    m.prefix = found.prefix;
    for (const auto& [name, value] : r.env) m.forward_env.push_back(name);
    m.extra_mpi_args = options_.mpirun_extra_args;
    if (auto gpus = rank_gpus(hosts, workers); !gpus.empty()) {
      // Each rank sees its host's reserved devices and is handed the one of
      // its local rank (see rank_gpus()).
      m.set_env[base::kEnvRankGpus] = gpus;
      m.command.insert(m.command.begin(), {"/bin/sh", "-c", kRankGpuWrapper, "muster-rank"});
    }
    // How mpirun reaches the hosts (ssh with the backend's key, srun inside
    // Slurm jobs), for this launch only.
    if (!found.rsh_agent.empty()) {
      m.extra_mpi_args.insert(m.extra_mpi_args.end(), {"-mca", "plm_rsh_agent", found.rsh_agent});
    }
    // The line the cluster shows (mpirun_command, the dashboard's Copy) is
    // one a user can run by hand.
    wiring.mpirun_argv = clusterspec::mpirun_argv(m);
    // The launched line adds what only musterd's own launch has: the
    // cluster id every rank carries, and in front of each rank's command
    // its exit report (kRankExitWrapper). mpirun names the first failed
    // rank only when its job ends in the order it expects (under load its
    // report is sometimes left out), and musterd names it either way.
    if (r.launch) {
      m.forward_env.push_back(base::kEnvClusterId);
      m.command.insert(m.command.begin(), {"/bin/sh", "-c", kRankExitWrapper, "muster-rank"});
      launched = clusterspec::mpirun_argv(m);
    }
    wiring.hostfile = clusterspec::write_hostfile(hosts);
  } catch (const clusterspec::SpecError& e) {
    return api::invalid_argument(std::string("cannot build the launch lines: ") + e.what());
  }
  if (auto err = base::write_file_atomically(dir_of(c.id) / "hostfile", wiring.hostfile)) {
    return api::internal_error(*err);
  }
  if (r.launch) {
    auto started = start_mpirun(c, workers, launched);
    if (!started) return started.status();
    wiring.launcher = std::move(started).value();
  }
  wiring.summary = r.launch ? "launched: " + clusterspec::join_for_shell(wiring.mpirun_argv) +
                                  " (each rank under muster's exit report)"
                            : clusterspec::join_for_shell(wiring.mpirun_argv);
  return wiring;
}

api::Result<std::unique_ptr<LauncherProcess>> MpiMode::start_mpirun(const api::Cluster& c,
                                                                          const std::vector<api::Worker>& workers,
                                                                          const std::vector<std::string>& mpirun) {
  LauncherSpec spec;
  spec.argv = mpirun;
  spec.env = c.request.env;
  spec.env[base::kEnvClusterId] = c.id;
  // Rank 0 reports training metrics as the first worker (its metrics
  // token, never its agent's). The launched line forwards them with -x;
  // the shown line stays without (a user may run it by hand, where they
  // are not set). Open MPI refuses mca_base_env_list beside -x.
  if (auto token = registry_.metrics_token(workers.front().id); !token.empty()) {
    spec.env[base::kEnvUrl] = registry_.agent_url();
    spec.env[base::kEnvWorkerId] = workers.front().id;
    spec.env[base::kEnvMetricsToken] = token;
    const std::vector<std::string> forward = {"-x", base::kEnvUrl, "-x", base::kEnvWorkerId, "-x",
                                              base::kEnvMetricsToken};
    spec.argv.insert(spec.argv.begin() + 1, forward.begin(), forward.end());
    if (const auto& pin = registry_.agent_tls_fingerprint(); !pin.empty()) {  // https: what rank 0 pins
      spec.env[api::kEnvTlsFingerprint] = pin;
      spec.argv.insert(spec.argv.begin() + 1, {"-x", api::kEnvTlsFingerprint});
    }
  }
  // Every rank finds muster's Python package and runtime extension as the
  // workers' scripts do (worker_python.h), also on hosts that do not share
  // mpirun's environment.
  for (const auto& [name, value] : python_env(registry_.worker_python(), c.request.env)) {
    spec.env[name] = value;
    if (!c.request.env.count(name)) spec.argv.insert(spec.argv.begin() + 1, {"-x", name});
  }
  // Under max_restarts every rank learns which run this is (torchrun's
  // TORCHELASTIC_RESTART_COUNT), on the launched line only.
  if (c.request.max_restarts > 0) {
    spec.env[base::kEnvRestartCount] = std::to_string(c.restarts);
    spec.argv.insert(spec.argv.begin() + 1, {"-x", base::kEnvRestartCount});
  }
  spec.working_dir = options_.project_dir;
  spec.log_path = dir_of(c.id) / "launcher.log";
  spec.tagged_output = true;  // whole lines, each rank's tagged once (cluster/mpi_output.h)
  return launcher_.start(spec);
}

std::optional<Verdict> MpiMode::verdict(const api::Cluster& c, const std::vector<api::Worker>& workers,
                                              std::optional<int> launcher_exit) const {
  if (!launcher_exit) return std::nullopt;  // launch=false: running until stopped
  if (*launcher_exit == 0) return Verdict{api::ClusterStatus::kSucceeded, ""};
  Verdict v{api::ClusterStatus::kFailed, "", failed_rank(c, workers)};
  if (v.failed_rank) {
    v.reason = v.failed_rank->describe() +
               (v.failed_rank->then_failed.empty() ? "" : "; then failed: " + v.failed_rank->then_failed) +
               "; mpirun ended the job (exit code " + std::to_string(*launcher_exit) +
               "); the cluster's logs have every rank's output";
  } else {
    v.reason = "mpirun exited with code " + std::to_string(*launcher_exit) + " without naming a failed rank (see " +
               "the cluster's logs, " + (dir_of(c.id) / "launcher.log").string() + ")";
  }
  return v;
}

// The rank whose failure came first (failure_report.h), placed on its host
// and worker the way mpirun maps ranks (by slot over -H, in order; within a
// host, the workers' slots in worker order), with its last lines and the
// ranks that then failed. The failed ranks, in the order they ended, are
// those that reported an exit other than 0 (kRankExitWrapper), with the
// first one mpirun names ahead of them when it names one the log has no
// report for; each one's exception and record come from its own lines.
std::optional<api::RankFailure> MpiMode::failed_rank(const api::Cluster& c,
                                                           const std::vector<api::Worker>& workers) const {
  constexpr size_t kTailLines = 20;
  constexpr size_t kReportLines = 200;
  const std::string log = read_launcher_log(c);

  std::vector<RankExit> ended;
  auto add = [&ended](const RankExit& e) {
    for (const auto& x : ended) {
      if (x.rank == e.rank) return;
    }
    ended.push_back(e);
  };
  const auto mpirun_first = first_failed_rank(log);
  const auto reported = reported_exits(log);
  if (mpirun_first && std::none_of(reported.begin(), reported.end(),
                                   [&](const RankExit& e) { return e.rank == mpirun_first->rank; })) {
    add(*mpirun_first);
  }
  for (const auto& e : reported) add(e);
  if (ended.empty()) return std::nullopt;

  const auto tails = rank_tails(log, kReportLines);
  std::vector<RankReport> reports;
  for (const auto& e : ended) {
    auto t = tails.find(e.rank);
    reports.push_back(read_rank_report(e.rank, t == tails.end() ? std::vector<std::string>{} : t->second));
  }
  const size_t root = root_cause(reports).index;
  const RankExit& exit = ended[root];

  api::RankFailure f;
  f.rank = exit.rank;
  f.exit_code = exit.exit_code;
  f.signal = exit.signal;
  f.signal_name = exit.signal_name;
  f.exception = reports[root].exception;
  f.log_tail = rank_tail(log, exit.rank, kTailLines);
  f.then_failed = then_failed_text(reports, root);
  std::tie(f.host, f.worker_id) = place_rank(c, workers, f.rank);
  return f;
}

bool MpiMode::resume(api::Cluster& c) {
  if (c.status != api::ClusterStatus::kRunning) return false;  // still starting: what wire() would have used is gone
  return !c.request.launch || c.launcher_process.has_value();
}

std::string MpiMode::read_launcher_log(const api::Cluster& c) const {
  constexpr std::uintmax_t kTailBytes = 1 << 20;
  const fs::path path = dir_of(c.id) / "launcher.log";
  std::ifstream in(path, std::ios::binary);
  if (!in) return "";
  std::error_code ec;
  const std::uintmax_t size = fs::file_size(path, ec);
  if (!ec && size > kTailBytes) in.seekg(static_cast<std::streamoff>(size - kTailBytes));
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

std::pair<std::string, std::string> MpiMode::place_rank(const api::Cluster& c,
                                                              const std::vector<api::Worker>& workers,
                                                              int rank) const {
  int first = 0;  // the first global rank of the host being looked at
  for (const auto& h : hosts_of(workers, c.request.slots)) {
    if (rank < first + h.slots) {
      int local = rank - first;
      for (const auto& w : workers) {
        if (w.ip_address != h.host) continue;
        if (local < c.request.slots) return {h.host, w.id};
        local -= c.request.slots;
      }
      return {h.host, ""};
    }
    first += h.slots;
  }
  return {"", ""};
}

std::map<std::string, WorkerRegistry::Ending> MpiMode::endings(const api::Cluster& c,
                                                                     api::ClusterStatus status,
                                                                     const std::vector<api::Worker>& workers) const {
  std::map<std::string, WorkerRegistry::Ending> out;
  if (!c.request.launch || !c.request.workers.empty()) return out;  // no ranks of ours ran in them
  if (status == api::ClusterStatus::kSucceeded) {
    for (const auto& w : workers) out[w.id] = {WorkerStatus::kSucceeded, 0};
    return out;
  }
  if (status != api::ClusterStatus::kFailed) return out;
  for (const auto& e : reported_exits(read_launcher_log(c))) {
    const std::string worker = place_rank(c, workers, e.rank).second;
    if (!worker.empty() && !out.count(worker)) out[worker] = {WorkerStatus::kFailed, e.exit_code};
  }
  if (c.failed_rank && !c.failed_rank->worker_id.empty() && !out.count(c.failed_rank->worker_id)) {
    out[c.failed_rank->worker_id] = {WorkerStatus::kFailed, c.failed_rank->exit_code};
  }
  return out;
}

LogSource MpiMode::log(const api::Cluster& c) const {
  LogSource source;
  if (c.request.launch) source.file = dir_of(c.id) / "launcher.log";
  return source;
}

}  // namespace muster::service
