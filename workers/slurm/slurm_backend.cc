#include "workers/slurm/slurm_backend.h"

#include <sys/stat.h>

#include <cctype>
#include <cmath>
#include <fstream>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "api/base/atomic_file.h"
#include "api/body_reader.h"
#include "api/base/settings.h"
#include "workers/backend_options.h"
#include "api/base/shell_quote.h"
#include "workers/slurm/job_state.h"

namespace muster::workers::slurm {

namespace fs = std::filesystem;

namespace {

// Writes `text` to `path` durably (api/base/atomic_file.h).
api::Status write_durably(const fs::path& path, const std::string& text, mode_t mode) {
  if (auto err = base::write_file_atomically(path, text, {mode})) return api::internal_error(*err);
  return api::Status::ok();
}

bool node_failed(const std::vector<std::string>& flags) {
  for (const auto& f : flags) {
    if (f == "DOWN" || f == "NOT_RESPONDING" || f == "FAIL" || f.rfind("down", 0) == 0) return true;
  }
  return false;
}

}  // namespace

std::string batch_script(const LaunchSpec& spec) {
  std::string s = "#!/bin/sh\n# musterd: worker " + spec.worker_id + " as a Slurm batch job; the agent runs the worker's script.\n";
  for (const auto& [k, v] : spec.env) s += "export " + k + "=" + base::shell_quote(v) + "\n";
  s += "exec";
  for (const auto& a : spec.agent_argv) s += " " + base::shell_quote(a);
  return s + "\n";
}

api::Result<SlurmOptions> SlurmOptions::from_map(const fs::path& state_dir,
                                                 const std::map<std::string, std::string>& opts) {
  SlurmOptions o;
  o.state_dir = state_dir;
  for (const auto& [key, value] : opts) {
    if (key == "master_address") {
      o.master_address = value;
    } else if (key == "partition") {
      o.partition = value;
    } else if (key == "account") {
      o.account = value;
    } else if (key == "qos") {
      o.qos = value;
    } else if (key == "time") {
      o.time_limit = value;
    } else if (key == "poll_ms") {
      auto ms = integer_option(key, value, 50, 60000, "a poll interval in milliseconds");
      if (!ms) return ms.status();
      o.poll_interval = std::chrono::milliseconds(*ms);
    } else if (key == "cancel_on_shutdown") {
      auto on = bool_option(key, value);
      if (!on) return on.status();
      o.cancel_on_shutdown = *on;
    } else {
      return api::invalid_argument("unknown --backend-opt '" + key +
                                       "' for the slurm backend (known: master_address, partition, account, qos, "
                                       "time, poll_ms, cancel_on_shutdown)",
                                   "backend-opt");
    }
  }
  if (o.master_address.empty()) {
    return api::invalid_argument(
        "the slurm backend needs --backend-opt master_address=<this host's address on the cluster network> "
        "(the address the nodes reach musterd at)",
        "backend-opt");
  }
  for (const std::string* v : {&o.partition, &o.account, &o.qos, &o.time_limit, &o.master_address}) {
    if (v->find_first_of(" \t\n'\"\\") != std::string::npos) {
      return api::invalid_argument("--backend-opt value '" + *v + "' may not contain spaces or quotes", "backend-opt");
    }
  }
  return o;
}

api::Result<std::unique_ptr<SlurmBackend>> SlurmBackend::create(SlurmOptions options,
                                                                std::unique_ptr<SlurmClient> client) {
  std::unique_ptr<SlurmBackend> b(new SlurmBackend(std::move(options), std::move(client)));
  std::error_code ec;
  fs::create_directories(b->ledger_path_.parent_path(), ec);
  if (ec) return api::internal_error("cannot create " + b->ledger_path_.parent_path().string() + ": " + ec.message());
  // Re-adopt the jobs an earlier daemon submitted.
  std::ifstream in(b->ledger_path_);
  if (in) {
    const auto doc = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
    if (doc.is_discarded() || !doc.is_object() || !doc.contains("jobs") || !doc["jobs"].is_object()) {
      return api::internal_error(b->ledger_path_.string() + " is not a muster job list; move it away to start afresh");
    }
    for (const auto& [worker, job] : doc["jobs"].items()) {
      if (job.is_string()) b->jobs_[worker].id = job.get<std::string>();
    }
    spdlog::info("slurm: re-adopting {} job(s) from {}", b->jobs_.size(), b->ledger_path_.string());
  }
  b->poller_ = std::thread([p = b.get()] { p->poll_loop(); });
  return b;
}

SlurmBackend::SlurmBackend(SlurmOptions options, std::unique_ptr<SlurmClient> client)
    : options_(std::move(options)),
      client_(std::move(client)),
      ledger_path_(options_.state_dir / "slurm" / "jobs.json") {}

SlurmBackend::~SlurmBackend() { shutdown(); }

api::Status SlurmBackend::save_locked() const {
  nlohmann::json jobs = nlohmann::json::object();
  for (const auto& [worker, job] : jobs_) jobs[worker] = job.id;
  return write_durably(ledger_path_, nlohmann::json{{"jobs", jobs}}.dump() + "\n", 0600);
}

api::Status SlurmBackend::launch(const std::vector<LaunchSpec>& specs) {
  std::vector<std::pair<std::string, std::string>> submitted;  // worker, job
  auto undo = [&](api::Status why) {
    for (const auto& [worker, job] : submitted) {
      if (auto s = client_->cancel(job); !s) {
        spdlog::error("slurm: job {} of worker {} (a launch being undone) could not be cancelled: {}", job, worker,
                      s.message());
      }
    }
    return why;
  };
  for (const auto& spec : specs) {
    for (const auto& [k, v] : spec.env) {
      if (!api::is_env_name(k)) {
        return undo(api::invalid_argument("worker " + spec.worker_id + ": '" + k + "' is not an environment name"));
      }
    }
    const fs::path script = spec.working_dir / "slurm-job.sh";
    if (auto s = write_durably(script, batch_script(spec), 0700); !s) {
      return undo(api::internal_error("worker " + spec.worker_id + ": " + s.message()));
    }
    JobSpec job;
    job.name = "muster-" + spec.worker_id;
    job.script = script;
    job.output = spec.log_path;
    job.working_dir = spec.working_dir;
    job.cpus_per_task = std::max(1, static_cast<int>(std::ceil(spec.cpu - 1e-9)));
    job.memory_mb = std::max(1L, static_cast<long>(std::ceil(spec.memory_gb * 1024 - 1e-6)));
    job.gpus = spec.nvidia_gpu;
    job.partition = options_.partition;
    job.account = options_.account;
    job.qos = options_.qos;
    job.time_limit = options_.time_limit;
    auto id = client_->submit(job);
    if (!id) return undo(api::unavailable("worker " + spec.worker_id + ": " + id.status().message()));
    submitted.emplace_back(spec.worker_id, id.value());
  }
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [worker, job] : submitted) jobs_[worker].id = job;
  if (auto s = save_locked(); !s) {
    for (const auto& [worker, job] : submitted) jobs_.erase(worker);
    return undo(s);
  }
  cv_.notify_all();  // ask squeue soon
  return api::Status::ok();
}

api::Status SlurmBackend::stop(const std::string& worker_id, std::chrono::milliseconds /*grace: Slurm's KillWait*/) {
  std::string job;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = jobs_.find(worker_id);
    if (it == jobs_.end() || it->second.final) return api::Status::ok();
    job = it->second.id;
  }
  return client_->cancel(job);
}

ProcessStatus SlurmBackend::poll(const std::string& worker_id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = jobs_.find(worker_id);
  if (it == jobs_.end()) return {};
  const Job& job = it->second;
  if (!job.info) {
    ProcessStatus st;
    st.state = ProcessState::kPending;
    st.reason = "submitted to Slurm as job " + job.id;
    return st;
  }
  ProcessStatus st = to_process_status(*job.info);
  if (st.state == ProcessState::kRunning && !job.info->nodes.empty()) {
    auto node = nodes_.find(job.info->nodes);
    if (node != nodes_.end() && node_failed(node->second.flags)) {
      st.state = ProcessState::kLost;
      st.outcome = api::WorkerStatus::kLost;
      std::string flags;
      for (const auto& f : node->second.flags) flags += (flags.empty() ? "" : "+") + f;
      st.reason = "Slurm reports node " + job.info->nodes + " " + flags + " (job " + job.id + ")";
    }
  }
  return st;
}

void SlurmBackend::forget(const std::string& worker_id) {
  std::lock_guard<std::mutex> lock(mu_);
  if (jobs_.erase(worker_id) == 0) return;
  // A ledger that keeps the old entry re-adopts a finished job after a
  // restart, which the registry then forgets again: logged, not fatal.
  if (auto s = save_locked(); !s) spdlog::warn("slurm: forgetting worker {}: {}", worker_id, s.message());
}

std::string SlurmBackend::job_of(const std::string& worker_id) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = jobs_.find(worker_id);
  return it == jobs_.end() ? "" : it->second.id;
}

void SlurmBackend::refresh() {
  std::vector<std::string> live;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [worker, job] : jobs_) {
      if (!job.final) live.push_back(job.id);
    }
  }
  if (live.empty()) return;
  auto jobs = client_->query(live);
  auto nodes = client_->nodes();
  std::lock_guard<std::mutex> lock(mu_);
  if (!jobs) {
    if (jobs.status().message() != query_error_) spdlog::warn("slurm: {}", jobs.status().message());
    query_error_ = jobs.status().message();
    return;
  }
  query_error_.clear();
  if (nodes) nodes_ = std::move(nodes).value();
  for (auto& [worker, job] : jobs_) {
    if (job.final) continue;
    auto found = jobs.value().find(job.id);
    if (found == jobs.value().end()) {
      // Slurm forgot the job (older than MinJobAge): keep the last state seen.
      if (job.info) job.final = true;
      continue;
    }
    job.info = found->second;
    const ProcessState s = to_process_status(found->second).state;
    job.final = s == ProcessState::kExited || s == ProcessState::kLost;
  }
}

void SlurmBackend::poll_loop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!shut_down_) {
    lock.unlock();
    refresh();
    lock.lock();
    cv_.wait_for(lock, options_.poll_interval, [this] { return shut_down_; });
  }
}

void SlurmBackend::shutdown() {
  std::vector<std::string> to_cancel;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (shut_down_) return;
    shut_down_ = true;
    if (options_.cancel_on_shutdown) {
      for (const auto& [worker, job] : jobs_) {
        if (!job.final) to_cancel.push_back(job.id);
      }
    }
  }
  cv_.notify_all();
  if (poller_.joinable()) poller_.join();
  for (const auto& job : to_cancel) {
    if (auto s = client_->cancel(job); !s) spdlog::error("slurm: job {} could not be cancelled at shutdown: {}", job, s.message());
  }
}

api::Result<MpiLaunchSettings> SlurmBackend::preflight_mpi(const MpiHostsRequest& request) {
  // request.ssh_port: unused (srun, not ssh); request.program: on the shared filesystem.
  const std::vector<std::string>& hosts = request.hosts;
  refresh();
  std::string map;
  std::vector<std::string> problems;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& host : hosts) {
      std::string node_name;
      for (const auto& [name, node] : nodes_) {
        if (node.address == host || name == host) node_name = name;
      }
      if (node_name.empty()) {
        problems.push_back(host + ": no Slurm node has this address");
        continue;
      }
      std::string job_id;
      for (const auto& [worker, job] : jobs_) {
        if (job.info && job.info->state == "RUNNING" && job.info->nodes == node_name) job_id = job.id;
      }
      if (job_id.empty()) {
        problems.push_back(host + ": no running muster job on node " + node_name);
        continue;
      }
      map += host + " " + job_id + " " + node_name + "\n";
    }
  }
  if (!problems.empty()) {
    std::string all;
    for (const auto& p : problems) all += (all.empty() ? "" : "; ") + p;
    return api::unavailable("cannot reach every host through Slurm: " + all);
  }
  // One map per host set; mpirun passes the agent's words on as they are.
  const fs::path map_path = options_.state_dir / "slurm" / ("rsh-" + std::to_string(std::hash<std::string>{}(map)));
  if (auto s = write_durably(map_path, map, 0600); !s) return s;
  fs::path agent = options_.rsh_agent;
  if (agent.empty()) agent = fs::read_symlink("/proc/self/exe").parent_path() / "muster-slurm-rsh";
  MpiLaunchSettings p;
  p.rsh_agent = agent.string() + " " + map_path.string();
  return p;
}

}  // namespace muster::workers::slurm
