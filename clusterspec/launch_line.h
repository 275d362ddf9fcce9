// Allreduce launch lines: horovodrun, and the Open MPI mpirun line that
// horovodrun would run for it. Options struct in, argument vector out.
//
//   HorovodrunOptions h;
//   h.hosts = {{"10.0.0.5", 1}, {"10.0.0.6", 1}};
//   h.ssh_port = 2222;
//   h.command = {"python3", "train.py"};
//   horovodrun_argv(h);
//   // {"horovodrun","-np","2","-H","10.0.0.5:1,10.0.0.6:1","-p","2222","python3","train.py"}
//
//   MpirunOptions m = mpirun_options_for(h);   // the same job, as mpirun
//   m.forward_env = {"PYTHONPATH"};
//   join_for_shell(mpirun_argv(m));            // shell.h, only to show or paste it
//   // mpirun --allow-run-as-root --tag-output -np 2 -H 10.0.0.5:1,10.0.0.6:1
//   //   -bind-to none -map-by slot -mca pml ob1 -mca btl ^openib
//   //   -mca plm_rsh_args '-p 2222' -x PYTHONPATH python3 train.py
//
// Run the vector with execve/Boost.Process, never through `sh -c`.
//
// Checks (SpecError on failure, naming the field): hosts as in hostfile.h;
// num_proc in 1..total slots (0 means total slots); ports 1..65535; interface
// names as is_valid_interface(); env names ^[A-Za-z_][A-Za-z0-9_]*$; the
// command is non-empty, does not start with '-' (horovodrun's parser would
// take it for an option) and no argument contains NUL. Everything that
// mpirun re-splits on spaces (the ssh arguments inside plm_rsh_args) must be
// free of whitespace and quotes.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "clusterspec/hostfile.h"

namespace muster::clusterspec {

// Horovod's own command-line flags, as its argparse parser accepts them.
struct HorovodrunOptions {
  std::string program = "horovodrun";
  std::vector<HostSlots> hosts;              // -H host:slots,...
  int num_proc = 0;                          // -np; 0 = total slots
  std::optional<int> ssh_port;               // -p
  std::string ssh_identity_file;             // -i
  // --network-interfaces eth0,eth1 (Horovod >= 0.25's spelling; the older
  // --network-interface is deprecated there).
  std::vector<std::string> network_interfaces;
  std::optional<int> fusion_threshold_mb;    // --fusion-threshold-mb (>= 0; 0 disables fusion)
  std::optional<double> cycle_time_ms;       // --cycle-time-ms (> 0)
  std::string timeline_filename;             // --timeline-filename
  std::optional<int> start_timeout_s;        // --start-timeout (> 0)
  bool verbose = false;                      // --verbose
  std::vector<std::string> command;          // what every rank runs
};

struct MpirunOptions {
  std::string program = "mpirun";
  std::string prefix;                        // --prefix DIR (Open MPI install on the hosts)
  std::vector<HostSlots> hosts;              // -H host:slots,...
  int num_proc = 0;                          // -np; 0 = total slots
  std::optional<int> ssh_port;               // inside -mca plm_rsh_args "-p PORT ..."
  std::string ssh_identity_file;             // inside plm_rsh_args: -i FILE
  std::vector<std::string> ssh_extra_args;   // inside plm_rsh_args, e.g. {"-o", "StrictHostKeyChecking=no"}
  // -mca btl_tcp_if_include IFS -mca oob_tcp_if_include IFS -x NCCL_SOCKET_IFNAME=IFS (IFS comma-joined)
  std::vector<std::string> network_interfaces;
  std::vector<std::string> forward_env;      // -x NAME (value taken from mpirun's environment)
  std::map<std::string, std::string> set_env;  // -x NAME=VALUE
  std::vector<std::string> extra_mpi_args;   // passed as is before the command (e.g. --oversubscribe)
  std::vector<std::string> command;
};

std::vector<std::string> horovodrun_argv(const HorovodrunOptions& options);
std::vector<std::string> mpirun_argv(const MpirunOptions& options);

// The mpirun options horovodrun would use for `options` with Open MPI:
// same hosts, -np, ssh port and key, interfaces; the tunables become the
// HOROVOD_FUSION_THRESHOLD (bytes), HOROVOD_CYCLE_TIME, HOROVOD_TIMELINE and
// HOROVOD_START_TIMEOUT variables it would export (verbose has no mpirun
// equivalent: it only makes horovodrun print more). Throws SpecError.
MpirunOptions mpirun_options_for(const HorovodrunOptions& options);

}  // namespace muster::clusterspec
