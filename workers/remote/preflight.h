// Preflight: checks every host before an mpi-mode launch, so that the usual
// Horovod/MPI set-up failures (no passwordless SSH, `orted: command not
// found` because the non-interactive PATH differs, MPI picking the wrong
// network interface) are reported per host before anything starts.
//
// For each host (in parallel), over one SSH session and one command:
//   1. connect and authenticate (keys only, known_hosts as configured);
//   2. `command -v` for mpirun, orted and the worker program, in the
//      non-interactive shell mpirun's own ssh will get, with its PATH;
//   3. `ip -o route get <peer>` for every other host -> the interface (dev).
// The report says what failed where, and the values for the launch line:
// Open MPI's --prefix (from orted's directory, when all hosts agree) and the
// interface list for `-mca btl_tcp_if_include` and NCCL_SOCKET_IFNAME.
//
//   PreflightOptions p;
//   p.hosts = backend.hosts();
//   p.program = "python3";
//   PreflightReport r = run_preflight(*make_libssh2_connector(c), p);
//   if (!r.ok) return api::unavailable(r.summary());
//   mpirun.prefix = r.prefix; mpirun.network_interface = r.interfaces;
#pragma once

#include <map>
#include <string>
#include <vector>

#include "workers/remote/host.h"
#include "workers/remote/remote.h"

namespace muster::workers::remote {

struct PreflightOptions {
  std::vector<Host> hosts;
  std::string program;                               // the worker program ("" = skip)
  std::vector<std::string> tools = {"mpirun", "orted"};
  std::string master_address;                        // route target when there is one host
};

struct HostReport {
  Host host;
  bool ok = false;
  std::vector<std::string> problems;                 // each says what to do
  std::map<std::string, std::string> found;          // tool or program -> path
  std::string remote_path;                           // the non-interactive PATH
  std::string interface;                             // dev that reaches the peers
};

struct PreflightReport {
  bool ok = false;
  std::vector<HostReport> hosts;
  std::string prefix;       // --prefix for mpirun ("" when hosts disagree or orted is missing)
  std::string interfaces;   // comma-separated: btl_tcp_if_include and NCCL_SOCKET_IFNAME
  // One line per failing host: "user@host:port: problem; problem".
  std::string summary() const;
};

PreflightReport run_preflight(Connector& connector, const PreflightOptions& options);

// Parsers, exposed for tests.
// "10.0.0.2 dev eth0 src 10.0.0.1 uid 0 \    cache" -> "eth0" ("" if none).
std::string parse_route_dev(const std::string& ip_route_get_output);
// ".../openmpi/bin/orted" -> ".../openmpi"; "/usr/bin/orted" -> "/usr".
std::string prefix_from_tool_path(const std::string& path);
// The output of the probe script: lines "name=path" (path empty when missing),
// "route:PEER=<first line of ip -o route get PEER>" and "PATH=...".
std::map<std::string, std::string> parse_probe(const std::string& output);
// The probe script itself: one command per host for all of steps 2 and 3.
std::string probe_command(const std::vector<std::string>& names, const std::vector<std::string>& peers);

}  // namespace muster::workers::remote
