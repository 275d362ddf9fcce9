// The MpiHosts answer (workers/mpi_hosts.h) of backends whose hosts run an
// sshd: the ssh backend (inventory hosts) and the container backend (an sshd
// per container). Both check their hosts with the preflight (preflight.h)
// and hand mpirun the ssh(1) command line that reaches the hosts the way the
// backend does (its key, user and known_hosts), as -mca plm_rsh_agent.
//
//   RshAgentOptions a{.identity_file = key, .user = "root", .known_hosts = kh};
//   ssh_rsh_agent(a);
//   // "ssh -i KEY -l root -o IdentitiesOnly=yes -o BatchMode=yes
//   //  -o StrictHostKeyChecking=yes -o UserKnownHostsFile=KH"
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "api/status.h"
#include "workers/mpi_hosts.h"
#include "workers/remote/host.h"
#include "workers/remote/remote.h"

namespace muster::workers::remote {

struct RshAgentOptions {
  std::filesystem::path identity_file;
  std::string user;
  std::string strict_host_key_checking = "yes";  // or "accept-new"
  std::filesystem::path known_hosts;
  bool ignore_global_known_hosts = false;        // -o GlobalKnownHostsFile=/dev/null
};

// The ssh(1) command line for mpirun's plm_rsh_agent. Open MPI splits it on
// spaces, so no part may contain one; the port comes from plm_rsh_args.
std::string ssh_rsh_agent(const RshAgentOptions& options);

struct SshMpiOptions {
  std::vector<Host> hosts;       // every host of the job, with its user, key and ssh port
  std::string program;           // checked on each host's non-interactive PATH
  std::string master_address;    // the route target when there is one host
  std::string rsh_agent;         // handed on as is ("" = mpirun's own ssh)
};

// Runs the preflight over `connector`: unavailable naming every failing host,
// else the launch-line values (--prefix, the interfaces, the rsh agent).
api::Result<MpiLaunchSettings> ssh_mpi_preflight(Connector& connector, const SshMpiOptions& options);

}  // namespace muster::workers::remote
