// MpiHosts: how the cluster side's mpirun reaches the hosts a backend placed
// an mpi cluster's workers on. The cluster manager (service/cluster/mpi_mode.cc)
// is its one caller and says what it needs; backends whose hosts mpirun
// cannot simply reach with a plain `ssh HOST` implement it beside Backend.
//
// Contract
// - preflight_mpi() runs once per mpi-mode cluster, after every worker
//   registered and before mpirun starts. It checks every host of the job
//   (reachable on `ssh_port`, mpirun/orted and `program` on the
//   non-interactive PATH, the interface that reaches the others) and returns
//   what the launch line needs. An error names each failing host; the caller
//   then launches nothing.
// - The answer is explicit: everything goes on mpirun's argument vector
//   (--prefix, -mca btl_tcp_if_include / oob_tcp_if_include,
//   -x NCCL_SOCKET_IFNAME, -mca plm_rsh_agent). A backend never reaches
//   mpirun through the daemon's process environment.
// - Any thread; implementations lock inside. An MpiHosts borrows its
//   backend's state (keys, inventory, jobs) and is valid while the backend is.
// - Implementations: container/ and ssh/ (over ssh with the backend's keys,
//   through workers/remote/), slurm/ (an rsh agent that starts Open MPI's
//   daemons inside the workers' jobs with srun). Workers on the daemon's own
//   host (local/) need none: the cluster side then uses mpirun's defaults.
#pragma once

#include <string>
#include <vector>

#include "api/status.h"

namespace muster::workers {

struct MpiHostsRequest {
  std::vector<std::string> hosts;  // the workers' addresses, one per host
  int ssh_port = 2222;             // the port mpirun's ssh uses (plm_rsh_args -p)
  std::string program;             // argv[0] of every rank's command
};

// Launch-line values for one mpi-mode launch ("" / empty = leave it out).
struct MpiLaunchSettings {
  std::string prefix;                           // Open MPI's --prefix on the hosts
  std::vector<std::string> network_interfaces;  // btl_tcp_if_include / NCCL_SOCKET_IFNAME
  // The program (and its arguments, space-separated, Open MPI's rule)
  // mpirun starts its daemons on the hosts with: -mca plm_rsh_agent.
  std::string rsh_agent;
};

class MpiHosts {
 public:
  virtual ~MpiHosts() = default;
  virtual api::Result<MpiLaunchSettings> preflight_mpi(const MpiHostsRequest& request) = 0;
};

}  // namespace muster::workers
