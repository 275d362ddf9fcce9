// Building one worker's container: its directory, network namespace, veth
// onto the bridge, sshd (waited for until it listens) and the agent inside.
#include <cctype>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "workers/container/container.h"

extern char** environ;

namespace muster::workers::container {
namespace fs = std::filesystem;
namespace {

std::string hostname_for(const std::string& worker_id) {
  std::string h;
  for (char ch : worker_id) h += (std::isalnum(static_cast<unsigned char>(ch)) ? ch : '-');
  if (h.empty() || !std::isalnum(static_cast<unsigned char>(h.front()))) h = "w" + h;
  if (h.size() > 63) h.resize(63);
  return h;
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

}  // namespace muster::workers::container
