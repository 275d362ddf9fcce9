#include "workers/local/local_backend.h"

#include <signal.h>

#include <thread>

namespace muster::workers::local {

namespace {

// Whether the group that `leader` started still has a live member: the
// leader itself, or (once it is gone) any process of its group, unless
// another process holds the leader's pid (then that group is long gone).
bool tree_alive(const base::ProcessId& leader) {
  if (base::alive(leader)) return true;
  auto now = base::read_proc_stat(leader.pid);
  if (now && now->start_time != leader.start_time) return false;
  return base::group_alive(leader.pid);
}

}  // namespace

LocalBackend::LocalBackend(LocalBackendOptions options) : options_(options) {
  reaper_ = std::thread([this] { reaper_loop(); });
}

LocalBackend::~LocalBackend() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    closing_ = true;
  }
  reaper_cv_.notify_all();
  reaper_.join();
}

void LocalBackend::reaper_loop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!reaper_cv_.wait_for(lock, std::chrono::milliseconds(200), [&] { return closing_; })) {
    for (auto& [id, child] : children_) reap_locked(child);
  }
}

api::Status LocalBackend::launch(const std::vector<LaunchSpec>& specs) {
  std::vector<std::string> started;
  for (const auto& spec : specs) {
    if (spec.agent_argv.empty()) {
      for (const auto& id : started) (void)stop(id, std::chrono::milliseconds(0));
      return api::invalid_argument("worker " + spec.worker_id + ": empty agent command");
    }
    // Own session and group; the daemon's listener and blocked signals stay
    // behind (an agent outliving a killed daemon must not hold its port).
    base::SpawnOptions o;
    o.argv = spec.agent_argv;
    o.env = spec.env;
    o.cwd = spec.working_dir;
    o.output = spec.log_path;
    o.new_session = true;
    auto spawned = base::spawn(o);
    if (spawned.failure) {
      for (const auto& id : started) (void)stop(id, std::chrono::milliseconds(0));
      return api::internal_error("worker " + spec.worker_id + ": " + *spawned.failure);
    }
    std::lock_guard<std::mutex> lock(mu_);
    children_[spec.worker_id] = Child{spawned.id, true, std::nullopt};
    started.push_back(spec.worker_id);
  }
  return api::Status::ok();
}

void LocalBackend::reap_locked(Child& child) {
  if (child.exit_code) return;
  if (child.ours) {
    child.exit_code = base::try_reap(child.id.pid);
  } else if (!base::alive(child.id)) {
    child.exit_code = -1;  // an adopted agent: not our child, its code is not ours to read
  }
}

bool LocalBackend::group_alive(const std::string& worker_id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = children_.find(worker_id);
  if (it == children_.end()) return false;
  reap_locked(it->second);
  if (!it->second.exit_code) return true;
  // The group outlives its leader while any descendant still runs.
  return tree_alive(it->second.id);
}

api::Status LocalBackend::stop(const std::string& worker_id, std::chrono::milliseconds grace) {
  base::ProcessId leader;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = children_.find(worker_id);
    if (it == children_.end()) return api::Status::ok();
    leader = it->second.id;
  }
  using clock = std::chrono::steady_clock;
  auto wait_gone = [&](clock::duration limit) {
    const auto deadline = clock::now() + limit;
    while (group_alive(worker_id)) {
      if (clock::now() >= deadline) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return true;
  };
  if (!group_alive(worker_id)) return api::Status::ok();  // nothing left: signal nobody
  (void)base::signal_group(leader, SIGTERM);
  if (wait_gone(grace)) return api::Status::ok();
  (void)base::signal_group(leader, SIGKILL);
  if (wait_gone(std::chrono::seconds(2))) return api::Status::ok();
  return api::internal_error("worker " + worker_id + ": process group " + std::to_string(leader.pid) +
                             " still exists after SIGKILL");
}

ProcessStatus LocalBackend::poll(const std::string& worker_id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = children_.find(worker_id);
  if (it == children_.end()) return {ProcessState::kUnknown, std::nullopt};
  reap_locked(it->second);
  if (it->second.exit_code) return {ProcessState::kExited, it->second.exit_code};
  return {ProcessState::kRunning, std::nullopt};
}

std::string LocalBackend::process_identity(const std::string& worker_id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = children_.find(worker_id);
  if (it == children_.end() || !it->second.id.valid()) return "";
  return it->second.id.to_string();
}

void LocalBackend::adopt(const std::string& worker_id, const std::string& identity) {
  auto id = base::ProcessId::parse(identity);
  if (!id) return;
  std::lock_guard<std::mutex> lock(mu_);
  if (!children_.count(worker_id)) children_[worker_id] = Child{*id, false, std::nullopt};
}

void LocalBackend::shutdown() {
  if (!options_.stop_on_shutdown) return;
  std::vector<std::string> ids;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [id, child] : children_) ids.push_back(id);
  }
  for (const auto& id : ids) (void)stop(id, std::chrono::seconds(2));
}

}  // namespace muster::workers::local
