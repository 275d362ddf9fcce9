#include "workers/container/container_backend.h"

#include "workers/ssh/preflight.h"

#include <csignal>
#include <fstream>
#include <random>
#include <sstream>

extern char** environ;

namespace muster::workers::container {
namespace fs = std::filesystem;

// One worker's container. Members are declared in the order they are built,
// so that destruction (reverse order) stops sshd before the link and the
// namespace go away.
struct ContainerBackend::Container {
  std::string worker_id;
  uint32_t index = 0;
  std::string address;
  fs::path dir;
  NetNamespace netns;
  VethPair veth;
  SshdProcess sshd;
  pid_t agent_pid = 0;
};

namespace {

std::string random_instance_id() {
  std::random_device rd;
  std::ostringstream out;
  out << std::hex << (rd() & 0xffff);
  std::string s = out.str();
  return std::string(4 - s.size(), '0') + s;
}

std::string hostname_for(const std::string& worker_id) {
  std::string h;
  for (char ch : worker_id) h += (std::isalnum(static_cast<unsigned char>(ch)) ? ch : '-');
  if (h.empty() || !std::isalnum(static_cast<unsigned char>(h.front()))) h = "w" + h;
  if (h.size() > 63) h.resize(63);
  return h;
}

bool valid_link_word(const std::string& s) {
  if (s.empty()) return false;
  for (char c : s)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_') return false;
  return true;
}

}  // namespace

bool tcp_listening(const std::string& proc_net_tcp, int port) {
  char want[8];
  std::snprintf(want, sizeof want, "%04X", port);
  std::istringstream in(proc_net_tcp);
  std::string line;
  std::getline(in, line);  // header
  while (std::getline(in, line)) {
    std::istringstream ls(line);
    std::string slot, local, remote, state;
    if (!(ls >> slot >> local >> remote >> state)) continue;
    auto colon = local.rfind(':');
    if (colon != std::string::npos && local.substr(colon + 1) == want && state == "0A") return true;
  }
  return false;
}

std::string replace_url_host(const std::string& url, const std::string& host) {
  auto scheme = url.find("://");
  if (scheme == std::string::npos) return url;
  size_t start = scheme + 3;
  size_t end = url.find_first_of(":/", start);
  if (end == std::string::npos) end = url.size();
  return url.substr(0, start) + host + url.substr(end);
}

api::Result<ContainerOptions> ContainerOptions::from_map(const fs::path& state_dir,
                                                         const std::map<std::string, std::string>& opts) {
  ContainerOptions o;
  o.state_dir = state_dir;
  for (const auto& [key, value] : opts) {
    if (key == "bridge") {
      if (!valid_link_word(value) || value.size() > 15)
        return api::invalid_argument("--backend-opt bridge='" + value + "': use 1-15 letters, digits, - or _",
                                     "bridge");
      o.bridge = value;
    } else if (key == "subnet") {
      o.subnet = value;
    } else if (key == "prefix") {
      if (!valid_link_word(value) || value.size() > 4)
        return api::invalid_argument("--backend-opt prefix='" + value + "': use 1-4 letters or digits", "prefix");
      o.prefix = value;
    } else if (key == "ssh_port") {
      try {
        o.ssh_port = std::stoi(value);
      } catch (...) {
        o.ssh_port = 0;
      }
      if (o.ssh_port < 1 || o.ssh_port > 65535)
        return api::invalid_argument("--backend-opt ssh_port='" + value + "': not a port number", "ssh_port");
    } else if (key == "sshd") {
      if (value != "on" && value != "off")
        return api::invalid_argument("--backend-opt sshd='" + value + "': use on or off", "sshd");
      o.start_sshd = value == "on";
    } else if (key == "instance") {
      if (!valid_link_word(value) || value.size() > 4)
        return api::invalid_argument("--backend-opt instance='" + value + "': use 1-4 letters or digits",
                                     "instance");
      o.instance_id = value;
    } else {
      return api::invalid_argument("unknown container backend option '" + key +
                                       "' (known: bridge, subnet, prefix, ssh_port, sshd, instance)",
                                   key);
    }
  }
  if (auto s = Subnet::parse(o.subnet); !s) return s.status();
  return o;
}

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
  if (options.export_mpi_ssh) ::setenv("OMPI_MCA_plm_rsh_agent", b->mpi_rsh_agent().c_str(), 1);
  if (options.reap_interval.count() > 0) {
    ContainerBackend* self = b.get();
    b->reaper_ = std::thread([self] { self->reap_loop(); });
  }
  return b;
}

ContainerBackend::ContainerBackend(ContainerOptions options, std::unique_ptr<Executor> exec, Subnet subnet)
    : options_(std::move(options)), exec_(std::move(exec)), subnet_(subnet), dir_(options_.state_dir / "container") {
  if (options_.instance_id.empty()) options_.instance_id = random_instance_id();
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

std::map<std::string, std::string> ContainerBackend::agent_env(const LaunchSpec& spec) const {
  std::map<std::string, std::string> env;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    std::string kv(*e);
    auto eq = kv.find('=');
    if (eq != std::string::npos) env[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  // spec.env already names master_address() (the registry builds MUSTER_URL
  // from it: api/agent_protocol.h).
  for (const auto& [k, v] : spec.env) env[k] = v;
  return env;
}

api::Result<std::unique_ptr<ContainerBackend::Container>> ContainerBackend::build(const LaunchSpec& spec,
                                                                                  uint32_t index) {
  auto c = std::make_unique<Container>();
  c->worker_id = spec.worker_id;
  c->index = index;
  c->address = subnet_.host(index);
  std::string tag = options_.prefix + options_.instance_id;
  std::string ns_name = tag + "-" + std::to_string(index);
  c->dir = dir_ / ns_name;
  std::error_code ec;
  fs::create_directories(c->dir, ec);
  if (ec) return api::internal_error("cannot create " + c->dir.string() + ": " + ec.message());

  auto ns = NetNamespace::create(*exec_, ledger_.get(), ns_name);
  if (!ns) return ns.status();
  c->netns = std::move(ns.value());

  VethOptions vo;
  vo.host_name = tag + "v" + std::to_string(index);
  vo.bridge = options_.bridge;
  vo.netns = ns_name;
  vo.address_cidr = c->address + "/" + std::to_string(subnet_.prefix_length());
  vo.gateway = subnet_.bridge_address();
  auto veth = VethPair::create(*exec_, ledger_.get(), vo);
  if (!veth) return veth.status();
  c->veth = std::move(veth.value());

  std::string hostname = hostname_for(spec.worker_id);
  pid_t uts_owner = 0;
  if (options_.start_sshd) {
    fs::path config = c->dir / "sshd_config";
    {
      std::ofstream out(config, std::ios::trunc);
      out << sshd_config_text(keys_, c->address, options_.ssh_port, c->dir / "sshd.pid");
      if (!out) return api::internal_error("cannot write " + config.string());
    }
    auto sshd = SshdProcess::start(*exec_, {ns_name, hostname, config, c->dir / "sshd.log"});
    if (!sshd) return sshd.status();
    c->sshd = std::move(sshd.value());
    uts_owner = c->sshd.pid();
    // sshd binds within milliseconds; /proc/<pid>/net/tcp shows its namespace's sockets.
    auto waited = std::chrono::milliseconds(0);
    const auto step = std::chrono::milliseconds(20);
    fs::path tcp = "/proc/" + std::to_string(uts_owner) + "/net/tcp";
    while (!tcp_listening(exec_->read_file(tcp), options_.ssh_port)) {
      if (auto code = exec_->try_wait(uts_owner)) {
        return api::internal_error("sshd in container " + ns_name + " exited with " + std::to_string(*code) +
                                   ": " + exec_->read_file(c->dir / "sshd.log"));
      }
      if (waited >= options_.sshd_ready_timeout)
        return api::internal_error("sshd in container " + ns_name + " did not listen on port " +
                                   std::to_string(options_.ssh_port) + " within " +
                                   std::to_string(options_.sshd_ready_timeout.count()) + " ms");
      exec_->sleep_for(step);
      waited += step;
    }
  }

  SpawnSpec agent;
  agent.argv = spec.agent_argv;
  agent.env = agent_env(spec);
  agent.cwd = spec.working_dir;
  agent.log_path = spec.log_path;
  agent.netns = ns_name;
  if (uts_owner != 0) agent.join_uts_of = uts_owner;
  else agent.new_hostname = hostname;
  auto pid = exec_->spawn(agent);
  if (!pid) return pid.status();
  c->agent_pid = pid.value();
  return c;
}

api::Status ContainerBackend::launch(const std::vector<LaunchSpec>& specs) {
  std::vector<uint32_t> indices;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (shut_down_) return api::unavailable("the container backend is shut down");
    uint32_t next = 2;
    for (const auto& spec : specs) {
      if (containers_.count(spec.worker_id))
        return api::conflict("worker " + spec.worker_id + " already has a container");
      while (used_indices_.count(next)) ++next;
      if (next - 1 > subnet_.container_capacity())
        return api::unavailable("subnet " + subnet_.cidr() + " has no free address for worker " + spec.worker_id +
                                "; stop workers or use a larger --backend-opt subnet=");
      indices.push_back(next);
      used_indices_.insert(next++);
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
  }
  teardown(*c, grace);
  std::lock_guard<std::mutex> lock(mu_);
  finished_[worker_id] = 128 + SIGTERM;
  used_indices_.erase(c->index);
  refresh_known_hosts();
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

api::Result<MpiPreflight> ContainerBackend::preflight_mpi(const std::vector<std::string>& hosts, int ssh_port,
                                                          const std::string& program) {
  ssh::ConnectOptions connect;
  connect.known_hosts = keys_.known_hosts;
  connect.timeout = std::chrono::milliseconds(5000);
  ssh::PreflightOptions p;
  for (const auto& address : hosts) {
    ssh::Host h;
    h.address = address;
    h.port = ssh_port;
    h.user = "root";
    h.identity_file = keys_.client_key;
    p.hosts.push_back(h);
  }
  p.program = program;
  p.master_address = master_address();
  auto connector = ssh::make_libssh2_connector(connect);
  ssh::PreflightReport report = ssh::run_preflight(*connector, p);
  if (!report.ok) return api::unavailable(report.summary());
  MpiPreflight found;
  found.prefix = report.prefix;
  found.network_interface = report.interfaces;
  return found;
}

std::string ContainerBackend::mpi_rsh_agent() const {
  // The port comes from plm_rsh_args ("-p 2222"); Open MPI splits this on spaces.
  return "ssh -i " + keys_.client_key.string() + " -l root -o IdentitiesOnly=yes -o BatchMode=yes" +
         " -o StrictHostKeyChecking=yes -o UserKnownHostsFile=" + keys_.known_hosts.string() +
         " -o GlobalKnownHostsFile=/dev/null";
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
