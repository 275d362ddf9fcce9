#include "workers/container/container_backend.h"

#include <csignal>
#include <random>
#include <sstream>

#include "workers/container/container.h"

namespace muster::workers::container {
namespace fs = std::filesystem;

namespace {

std::string random_instance_id() {
  std::random_device rd;
  std::ostringstream out;
  out << std::hex << (rd() & 0xffff);
  std::string s = out.str();
  return std::string(4 - s.size(), '0') + s;
}

}  // namespace

void ContainerBackend::clean_leftovers(Executor& exec, Ledger& ledger) {
  auto entries = ledger.entries();
  // Namespaces first (with every process inside), then links, then bridges.
  for (ResourceKind kind : {ResourceKind::kNetns, ResourceKind::kLink, ResourceKind::kBridge}) {
    for (auto it = entries.rbegin(); it != entries.rend(); ++it) {
      if (it->kind != kind) continue;
      if (kind == ResourceKind::kNetns) {
        CommandResult pids = exec.run({kIpTool, "netns", "pids", it->name});
        std::istringstream in(pids.output);
        long pid;
        while (in >> pid) exec.kill_process(static_cast<pid_t>(pid), SIGKILL);
        (void)run_ip(exec, {"netns", "delete", it->name});
      } else {
        (void)run_ip(exec, {"link", "delete", it->name});
      }
      ledger.remove(kind, it->name);
    }
  }
}

api::Result<std::unique_ptr<ContainerBackend>> ContainerBackend::create(const ContainerOptions& options,
                                                                        std::unique_ptr<Executor> exec) {
  if (!exec->is_root())
    return api::unavailable(
        "the container backend needs root: it creates network namespaces, veth pairs, a bridge and an sshd per "
        "worker; run musterd as root (e.g. sudo) or use --backend local");
  auto subnet = Subnet::parse(options.subnet);
  if (!subnet) return subnet.status();
  if (options.state_dir.empty()) return api::invalid_argument("the container backend needs a state dir");
  std::unique_ptr<ContainerBackend> b(new ContainerBackend(options, std::move(exec), subnet.value()));
  std::error_code ec;
  fs::create_directories(b->dir_, ec);
  if (ec) return api::internal_error("cannot create " + b->dir_.string() + ": " + ec.message());
  b->ledger_ = std::make_unique<Ledger>(b->dir_ / "ledger");
  clean_leftovers(*b->exec_, *b->ledger_);
  auto keys = SshKeys::ensure(*b->exec_, b->dir_ / "ssh");
  if (!keys) return keys.status();
  b->keys_ = keys.value();
  if (auto s = b->start_bridge(); !s) return s;
  if (options.reap_interval.count() > 0) {
    ContainerBackend* self = b.get();
    b->reaper_ = std::thread([self] { self->reap_loop(); });
  }
  return b;
}

ContainerBackend::ContainerBackend(ContainerOptions options, std::unique_ptr<Executor> exec, Subnet subnet)
    : options_(std::move(options)), exec_(std::move(exec)), subnet_(subnet), dir_(options_.state_dir / "container") {
  if (options_.instance_id.empty()) options_.instance_id = random_instance_id();
  base::TaskQueueOptions q;
  q.threads = options_.teardown_threads;
  q.name = "container teardowns";
  teardowns_ = std::make_unique<base::TaskQueue>(q);
}

ContainerBackend::~ContainerBackend() { shutdown(); }

api::Status ContainerBackend::start_bridge() {
  if (exec_->read_file("/sys/class/net/" + options_.bridge + "/ifindex").size() > 0)
    return api::unavailable("bridge " + options_.bridge +
                            " already exists and this daemon did not create it (another musterd?); pick another "
                            "with --backend-opt bridge=NAME and subnet=CIDR");
  auto bridge = Bridge::create(*exec_, ledger_.get(), options_.bridge,
                               subnet_.bridge_address() + "/" + std::to_string(subnet_.prefix_length()));
  if (!bridge) return bridge.status();
  bridge_ = std::move(bridge.value());
  return api::Status::ok();
}

api::Status ContainerBackend::launch(const std::vector<LaunchSpec>& specs) {
  std::vector<uint32_t> indices;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (shut_down_) return api::unavailable("the container backend is shut down");
    // Addresses go round the subnet rather than lowest-free first: a
    // container that reused an address just freed would meet the host's
    // TIME_WAIT sockets and neighbour entry of the one before it (its fresh
    // namespace picks the same source ports), and its first connections to
    // the daemon stall for seconds.
    const uint32_t first = 2, last = subnet_.container_capacity() + 1;
    for (const auto& spec : specs) {
      if (containers_.count(spec.worker_id)) {
        for (uint32_t idx : indices) used_indices_.erase(idx);
        return api::conflict("worker " + spec.worker_id + " already has a container");
      }
      uint32_t next = next_index_ < first || next_index_ > last ? first : next_index_;
      uint32_t tried = 0;
      while (used_indices_.count(next) && tried <= last - first) {
        next = next == last ? first : next + 1;
        ++tried;
      }
      if (used_indices_.count(next)) {
        for (uint32_t idx : indices) used_indices_.erase(idx);
        return api::unavailable("subnet " + subnet_.cidr() + " has no free address for worker " + spec.worker_id +
                                "; stop workers or use a larger --backend-opt subnet=");
      }
      indices.push_back(next);
      used_indices_.insert(next);
      next_index_ = next == last ? first : next + 1;
    }
  }
  std::vector<std::unique_ptr<Container>> built;
  api::Status failure;
  for (size_t i = 0; i < specs.size(); ++i) {
    auto c = build(specs[i], indices[i]);
    if (!c) {
      failure = api::Status(c.status().code(),
                            "worker " + specs[i].worker_id + ": cannot start its container: " + c.status().message());
      break;
    }
    built.push_back(std::move(c.value()));
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (!failure.is_ok()) {
    for (auto& c : built) teardown(*c, std::chrono::milliseconds(0));
    built.clear();  // containers not built were cleaned by their RAII members already
    for (uint32_t idx : indices) used_indices_.erase(idx);
    next_index_ = indices.front();  // no container ever held them
    return failure;
  }
  for (auto& c : built) {
    finished_.erase(c->worker_id);
    containers_[c->worker_id] = std::move(c);
  }
  refresh_known_hosts();
  return api::Status::ok();
}

void ContainerBackend::teardown(Container& c, std::chrono::milliseconds grace) {
  if (c.agent_pid != 0) {
    exec_->kill_group(c.agent_pid, SIGTERM);
    auto waited = std::chrono::milliseconds(0);
    const auto step = std::chrono::milliseconds(20);
    while (!exec_->try_wait(c.agent_pid)) {
      if (waited >= grace) {
        exec_->kill_group(c.agent_pid, SIGKILL);
        for (int i = 0; i < 250 && !exec_->try_wait(c.agent_pid); ++i) exec_->sleep_for(step);
        break;
      }
      exec_->sleep_for(step);
      waited += step;
    }
    c.agent_pid = 0;
  }
  // Whatever else runs in the namespace (ranks started over ssh, strays).
  if (c.netns.valid()) {
    CommandResult pids = exec_->run({kIpTool, "netns", "pids", c.netns.name()});
    std::istringstream in(pids.output);
    long pid;
    while (in >> pid)
      if (pid != c.sshd.pid()) exec_->kill_process(static_cast<pid_t>(pid), SIGKILL);
  }
  c.sshd.stop();
  c.veth.reset();
  c.netns.reset();
  std::error_code ec;
  fs::remove_all(c.dir, ec);
}

api::Status ContainerBackend::stop(const std::string& worker_id, std::chrono::milliseconds grace) {
  std::unique_ptr<Container> c;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = containers_.find(worker_id);
    if (it == containers_.end()) return api::Status::ok();
    c = std::move(it->second);
    containers_.erase(it);
    finished_[worker_id] = 128 + SIGTERM;
  }
  // Signalled now; the grace, SIGKILL and the teardown run on a teardown
  // thread, and the container's address is free once that is done.
  if (c->agent_pid != 0) exec_->kill_group(c->agent_pid, SIGTERM);
  std::shared_ptr<Container> ending(std::move(c));
  teardowns_->post([this, ending, grace] {
    teardown(*ending, grace);
    std::lock_guard<std::mutex> lock(mu_);
    used_indices_.erase(ending->index);
    refresh_known_hosts();
  });
  return api::Status::ok();
}

ProcessStatus ContainerBackend::poll(const std::string& worker_id) {
  std::unique_ptr<Container> ended;
  int code = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = containers_.find(worker_id);
    if (it == containers_.end()) {
      auto f = finished_.find(worker_id);
      if (f == finished_.end()) return {ProcessState::kUnknown, std::nullopt};
      return {ProcessState::kExited, f->second};
    }
    Container& c = *it->second;
    if (auto exited = exec_->try_wait(c.agent_pid)) {
      code = *exited;
      c.agent_pid = 0;
      ended = std::move(it->second);
      containers_.erase(it);
      finished_[worker_id] = code;
    } else {
      std::string carrier = exec_->read_file("/sys/class/net/" + c.veth.name() + "/carrier");
      if (!carrier.empty() && carrier[0] == '0') return {ProcessState::kLost, std::nullopt};
      return {ProcessState::kRunning, std::nullopt};
    }
  }
  teardown(*ended, std::chrono::milliseconds(0));
  std::lock_guard<std::mutex> lock(mu_);
  used_indices_.erase(ended->index);
  refresh_known_hosts();
  return {ProcessState::kExited, code};
}

void ContainerBackend::reap_loop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!shut_down_) {
    reap_cv_.wait_for(lock, options_.reap_interval);
    if (shut_down_) break;
    std::vector<std::string> ids;
    for (const auto& [id, c] : containers_) ids.push_back(id);
    lock.unlock();
    for (const auto& id : ids) (void)poll(id);
    lock.lock();
  }
}

void ContainerBackend::shutdown() {
  std::map<std::string, std::unique_ptr<Container>> all;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (shut_down_) return;
    shut_down_ = true;
    all.swap(containers_);
    used_indices_.clear();
  }
  teardowns_->drain();  // the stops under way end first
  teardowns_->close();
  reap_cv_.notify_all();
  if (reaper_.joinable()) reaper_.join();
  for (auto& [id, c] : all) teardown(*c, std::chrono::milliseconds(500));
  all.clear();
  bridge_.reset();
  if (ledger_) clean_leftovers(*exec_, *ledger_);  // anything a failed teardown missed
  std::error_code ec;
  if (!keys_.known_hosts.empty()) fs::remove(keys_.known_hosts, ec);
}

void ContainerBackend::refresh_known_hosts() {
  std::vector<std::string> addresses;
  for (const auto& [id, c] : containers_) addresses.push_back(c->address);
  (void)keys_.write_known_hosts(addresses, options_.ssh_port);
}

std::string ContainerBackend::address_of(const std::string& worker_id) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = containers_.find(worker_id);
  return it == containers_.end() ? std::string() : it->second->address;
}

std::string ContainerBackend::netns_of(const std::string& worker_id) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = containers_.find(worker_id);
  return it == containers_.end() ? std::string() : it->second->netns.name();
}

std::string ContainerBackend::host_link_of(const std::string& worker_id) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = containers_.find(worker_id);
  return it == containers_.end() ? std::string() : it->second->veth.name();
}

}  // namespace muster::workers::container
