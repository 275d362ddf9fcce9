// The container backend's MpiHosts: mpirun reaches the containers over their
// sshd, as root with the backend's generated key and strict known_hosts.
#include "workers/container/container_backend.h"
#include "workers/remote/ssh_mpi.h"

namespace muster::workers::container {

api::Result<MpiLaunchSettings> ContainerBackend::preflight_mpi(const MpiHostsRequest& request) {
  remote::ConnectOptions connect;
  connect.known_hosts = keys_.known_hosts;
  // The probe runs in root's non-interactive shell, which reads root's
  // startup files (pyenv init alone takes seconds on a loaded host).
  connect.timeout = std::chrono::milliseconds(30000);
  remote::SshMpiOptions p;
  for (const auto& address : request.hosts) {
    remote::Host h;
    h.address = address;
    h.port = request.ssh_port;
    h.user = "root";
    h.identity_file = keys_.client_key;
    p.hosts.push_back(h);
  }
  p.program = request.program;
  p.master_address = master_address();
  if (options_.mpi_ssh) p.rsh_agent = mpi_rsh_agent();
  auto connector = remote::make_libssh2_connector(connect);
  return remote::ssh_mpi_preflight(*connector, p);
}

std::string ContainerBackend::mpi_rsh_agent() const {
  remote::RshAgentOptions a;
  a.identity_file = keys_.client_key;
  a.user = "root";
  a.known_hosts = keys_.known_hosts;
  a.ignore_global_known_hosts = true;
  return remote::ssh_rsh_agent(a);
}

}  // namespace muster::workers::container
