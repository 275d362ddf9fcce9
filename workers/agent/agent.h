// Agent: what muster-agent does inside a worker. The daemon-side half of
// the protocol is service/agent_routes.h; the steps, as run() performs them:
//  0. become a child subreaper and join the worker's cgroup (MUSTER_CGROUP,
//     else one of its own where cgroup v2 allows; leftovers.h), before
//     anything forks; set up the cpu/memory limits there or in cgroup v1
//     directories (limits.h), which the registration reports;
//  1. find the local IP that routes to MUSTER_MASTER_IP; reserve a port on
//     it when MUSTER_RESERVE_PORT=1;
//  2. register {ip_address, port, limits} (retrying while the daemon is unreachable);
//     a 404/409 means the worker is gone or finished: exit without running;
//  3. if the reply says hold: long-poll wait-release until the daemon hands
//     over env and files; write the files into the worker's directory (the
//     agent's own working directory, MUSTER_WORKER_DIR) atomically (tmp +
//     rename) and add the env;
//  4. start the script by kernel (each process joins the limits' v1
//     directories between fork and exec), in the agent's process group, output to the agent's stdout
//     (the worker's log), MUSTER_IP_ADDRESS, CDSW_IP_ADDRESS and
//     MUSTER_WORKER_DIR set; its working directory is MUSTER_PROJECT_DIR
//     when that directory exists on this host (script_directory()), else
//     the worker's directory, with a log line saying so; a
//     release with `processes` (torchrun's nproc_per_node) starts the script
//     once per entry, with the entry's variables: when one fails the others
//     get SIGTERM (SIGKILL 5 s later), its exit code is the agent's, and
//     the log names it ("process 1 of 2 (LOCAL_RANK=1 RANK=3 ...) was
//     killed by signal 9");
//  5. heartbeat every MUSTER_HEARTBEAT_S on a second thread; a 404/409 reply
//     (stopped, lost), three 401/403 replies in a row (a daemon that no
//     longer knows the token: restarted with another state dir), or no
//     answer for MUSTER_ORPHAN_TIMEOUT_S, ends the script's whole process
//     group and the agent, with a log line saying which;
//  6. when the script ends, end what it left running (SIGTERM, up to
//     MUSTER_STOP_GRACE_S, SIGKILL: background children, setsid or
//     double-forked escapees), report exit {exit_code, out_of_memory} (128+signal when killed;
//     out_of_memory from the cgroup's OOM kill counter; after a stop only once, briefly: the daemon has recorded the
//     stop already) and exit with the same code. SIGTERM/SIGINT are
//     forwarded to the script.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <map>
#include <string>
#include <vector>

#include "api/agent_protocol.h"
#include "workers/agent/http_client.h"

namespace muster::workers::agent {

// What muster-agent was started with: its environment and its command line,
// as api/agent_protocol.h parses and checks them.
struct AgentOptions {
  api::AgentEnvironment env;  // MUSTER_* (MUSTER_MASTER_IP default: the URL's host)
  api::AgentCommand command;  // --kernel / --script / --code, and the script's arguments
  // The log relay (log_relay.h) the agent forked, -1 without one: a child of
  // the agent, yet no leftover of the script (ending it would lose the log's
  // tail).
  pid_t log_relay = -1;
};

// With no daemon answering for this long (MUSTER_ORPHAN_TIMEOUT_S unset), the
// agent ends the script and exits; a daemon restart takes far less.
inline constexpr std::chrono::milliseconds kDefaultOrphanTimeout{300'000};

// The script's command line for `options`: api/kernel.h's rules (the same
// the cluster manager runs MPI ranks with).
std::vector<std::string> script_command(const AgentOptions& options);

// The script's scratch directory is the agent's working directory, where the
// backend started it (<state-dir>/workers/<id>), given to the script as
// MUSTER_WORKER_DIR (base::kEnvWorkerDir).

// Where the script starts: `project_dir` when it is a directory on this host
// (as a notebook's workers start in the project), else `worker_dir` and
// `note` says why (an ssh host without the project). An empty project_dir
// (an agent started by hand) keeps `worker_dir` without a note.
struct ScriptDirectory {
  std::string path;
  std::string note;  // "" when the project directory was used or none was given
};
ScriptDirectory script_directory(const std::string& project_dir, const std::string& worker_dir);

// Runs steps 1-6; returns the agent's exit code.
int run_agent(const AgentOptions& options);

}  // namespace muster::workers::agent
