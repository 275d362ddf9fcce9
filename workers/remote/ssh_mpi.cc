#include "workers/remote/ssh_mpi.h"

#include <sstream>

#include "workers/remote/preflight.h"

namespace muster::workers::remote {

std::string ssh_rsh_agent(const RshAgentOptions& o) {
  std::string out = "ssh -i " + o.identity_file.string() + " -l " + o.user +
                    " -o IdentitiesOnly=yes -o BatchMode=yes -o StrictHostKeyChecking=" +
                    o.strict_host_key_checking + " -o UserKnownHostsFile=" + o.known_hosts.string();
  if (o.ignore_global_known_hosts) out += " -o GlobalKnownHostsFile=/dev/null";
  return out;
}

api::Result<MpiLaunchSettings> ssh_mpi_preflight(Connector& connector, const SshMpiOptions& options) {
  PreflightOptions p;
  p.hosts = options.hosts;
  p.program = options.program;
  p.master_address = options.master_address;
  PreflightReport report = run_preflight(connector, p);
  if (!report.ok) return api::unavailable(report.summary());
  MpiLaunchSettings found;
  found.prefix = report.prefix;
  std::istringstream interfaces(report.interfaces);
  for (std::string name; std::getline(interfaces, name, ',');) {
    if (!name.empty()) found.network_interfaces.push_back(name);
  }
  found.rsh_agent = options.rsh_agent;
  return found;
}

}  // namespace muster::workers::remote
