// The agent protocol, defined once: how musterd starts muster-agent (its
// command line and environment) and the JSON bodies the two exchange over
// /api/v1/agent/workers/{id}/... (api/openapi.yaml, tag "agent"). The daemon
// builds with the to_*() functions (service/registry/launch.cc) and reads with
// the *_from_json() ones (service/agent_routes.cc); the agent does the
// converse (workers/agent/main.cc, agent.cc). Nothing else builds or reads
// these variables or spells a field of these bodies (but api/log_capture.h:
// where the agent writes its output, MUSTER_LOG_*); every variable's name
// is api/base/worker_env.h's.
//
// Contract
// - parse_*() and *_from_json() accept exactly what the to_*() functions
//   write (tests/agent_protocol_test.cc round-trips each) and reject anything
//   else with invalid_argument whose `field` names the argument, variable or
//   JSON field at fault and whose message says what it must be.
// - The protocol, as the agent runs it: a) register {ip_address, port?, limits?} ->
//   {hold}; b) if hold, wait-release (long-poll; 204 = ask again) until 200
//   Release {env, files}; c) heartbeat {} every MUSTER_HEARTBEAT_S, or every
//   heartbeat_s once a reply (register's or a heartbeat's) gives one (409:
//   the worker was stopped or lost, end the script); d) exit {exit_code,
//   out_of_memory?}.
// - heartbeat_s is the daemon's heartbeat budget at work (service/registry/
//   registry.h, "Heartbeats at fleet scale"): with more running workers than
//   its rate allows at MUSTER_HEARTBEAT_S it stretches every agent's
//   interval, and counts its loss timeout in those longer intervals.
#pragma once

#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "api/base/tls_env.h"
#include "api/base/worker_env.h"
#include "api/status.h"
#include "api/worker.h"

namespace muster::api {

// ---- The command line: <agent> --kernel K (--script PATH | --code TEXT) [--python PATH] -- ARGS...

struct AgentCommand {
  std::string kernel = kKernelPython3;
  std::string script;  // absolute path on the worker's host; "" when code is given
  std::string code;    // inline code; "" when script is given
  std::vector<std::string> args;  // the script's arguments
  std::string python{};  // the interpreter (api/kernel.h, PYTHON); "" = the default
};

// argv[0] is `agent_path`.
std::vector<std::string> to_argv(const std::string& agent_path, const AgentCommand& command);
// `argv` as main() gets it (argv[0] is skipped). Exactly one of --script and
// --code; the field of an error is the flag at fault.
Result<AgentCommand> parse_agent_argv(const std::vector<std::string>& argv);

// ---- The environment

// The variables the agent reads, and those for the script only (the agent
// passes them through): their names and meanings are api/base/worker_env.h's.
using base::kEnvAgentToken;
using base::kEnvCaFile;
using base::kEnvCgroup;
using base::kEnvCgroupRoot;
using base::kEnvCpu;
using base::kEnvFileLimit;
using base::kEnvGpuDevices;
using base::kEnvHeartbeatSeconds;
using base::kEnvLimitsEnforcedBy;
using base::kEnvMasterIp;
using base::kEnvMemoryGb;
using base::kEnvMetricsToken;
using base::kEnvOrphanTimeoutSeconds;  // never set by the daemon
using base::kEnvProjectDir;
using base::kEnvReservePort;
using base::kEnvStopGraceSeconds;
using base::kEnvTlsFingerprint;
using base::kEnvUrl;
using base::kEnvWorkerId;
// kEnvCgroup: the agent makes the cgroup (if need be) and joins it first
// thing, so every process of the worker is born inside it. Unset: the agent
// makes one of its own where it can; kCgroupNone: none at all (the agent's
// subreaper and process group only).
inline constexpr const char* kCgroupNone = "none";
// kEnvFileLimit: musterd raises its own open-files limit to the hard limit
// (it holds a pidfd and the agent's heartbeat connection per running
// worker) and sets this in its environment; an agent that finds it puts its
// own soft limit back, so scripts start with the limit they would have had
// (select() in old code breaks above 1,024).
// kEnvLimitsEnforcedBy: the agent then makes no cgroup for the limits and
// reports them "enforced by <value>".
// kEnvCgroupRoot (tests only, api/base/cgroup_limits.h, CgroupMounts::under):
// e.g. an empty directory makes every limit unenforceable; musterd reads it
// too, for its launch warnings, and a local backend's agent inherits it.
// kEnvTlsFingerprint / kEnvCaFile: how the agent verifies an https://
// MUSTER_URL (pinning needs no file on the worker's host, container or pod).

struct AgentEnvironment {
  std::string url;          // the daemon as the worker reaches it: http(s)://<master_ip>:<port>
  std::string worker_id;
  std::string token;        // the worker's agent token (the agent hides it from the script)
  std::string master_ip;    // the daemon's address on the workers' network
  std::chrono::milliseconds heartbeat{2000};
  bool reserve_port = false;  // clusters: reserve a TCP port and register it
  double cpu = 0;             // cores, for the agent's limits
  double memory_gb = 0;       // GiB, for the agent's limits
  std::optional<std::chrono::milliseconds> orphan_timeout;  // unset: the agent's default
  std::chrono::milliseconds stop_grace{3000};  // SIGTERM -> SIGKILL for the script's leftovers
  std::string cgroup;         // "" = none (the backend made no cgroup)
  std::string limits_enforced_by;  // "" = the agent enforces them (cgroups)
  std::string cgroup_root;    // "" = the real hierarchies (tests only)
  std::string metrics_token;  // "" = none given
  std::string project_dir;
  std::string gpu_devices;    // "0,1" (also CUDA_VISIBLE_DEVICES, NVIDIA_VISIBLE_DEVICES); "" = none
  std::string tls_fingerprint;  // https: the pinned SHA-256 of musterd's certificate; "" = none
  std::string ca_file;          // https: a CA file on the worker's host; "" = none
};

// http://<host>:<port> (https:// when tls), the one way MUSTER_URL is formed.
std::string agent_url(const std::string& host, int port, bool tls = false);

// Every variable of `e`, plus cdsw's engine variables that mean something
// here (CDSW_ENGINE_ID, CDSW_MASTER_IP, CML_MASTER_IP, CDSW_PROJECT,
// CDSW_CPU_MILLICORES, CDSW_MEMORY_MB). The agent adds MUSTER_IP_ADDRESS,
// CDSW_IP_ADDRESS and MUSTER_PORT once it knows them.
std::map<std::string, std::string> to_env(const AgentEnvironment& e);
// What the agent needs from its environment. url (http(s)://host:port),
// worker id and token are required; the numbers must be numbers (heartbeat
// and orphan timeout > 0, cpu and memory >= 0); MUSTER_RESERVE_PORT is "1" or
// "0"/unset. The field of an error is the variable's name.
Result<AgentEnvironment> parse_agent_env(const std::map<std::string, std::string>& env);
// The process's environment as a map (environ).
std::map<std::string, std::string> process_env();

// ---- The JSON bodies

// POST .../register
struct AgentRegistration {
  std::string ip_address;   // IPv4: the worker's address that routes to the daemon
  std::optional<int> port;  // 1..65535, the port reserved with MUSTER_RESERVE_PORT=1
  // How each limit is enforced on the worker's host: "cpu"/"memory" ->
  // "enforced by ..." or "not enforced: <why>" (api/base/cgroup_limits.h).
  // Optional: an older agent sends none; no other keys.
  std::map<std::string, std::string> limits{};
};
// The longest interval a reply may set (an hour), and the shortest (10 ms).
inline constexpr std::chrono::milliseconds kMaxHeartbeatInterval{3'600'000};
inline constexpr std::chrono::milliseconds kMinHeartbeatInterval{10};
// The reply: hold = wait for a release before running the script;
// heartbeat: the interval to heartbeat at from now on (absent: keep
// MUSTER_HEARTBEAT_S; an older daemon sends none).
struct AgentRegistered {
  bool hold = false;
  std::optional<std::chrono::milliseconds> heartbeat{};
};
// POST .../heartbeat's reply: {} or {heartbeat_s}, as AgentRegistered's.
struct AgentHeartbeatReply {
  std::optional<std::chrono::milliseconds> heartbeat{};
};
// POST .../exit
struct AgentExit {
  int exit_code = 0;  // 0..255; 128+signal when the script was killed
  // The kernel's OOM killer ended a process of the worker (read from its
  // cgroup's OOM events). Optional: absent means false.
  bool out_of_memory = false;
};
// POST .../wait-release, 200: what a held worker's agent receives; env is
// added to the script's, files are written (atomically) into the worker's
// working directory. Empty env/files are allowed. `processes` (torchrun's
// nproc_per_node): the agent runs the script once per entry, each with the
// entry's variables over `env`; none means one process. At most
// kMaxReleaseProcesses entries; their names are environment names.
// `interface_env` (torchrun mode: GLOO_SOCKET_IFNAME, ...): variables the
// agent sets to the name of the network interface holding the address it
// registered, each unless the worker's environment already has it (a
// container's hostname may resolve to loopback, where gloo would then
// listen). At most kMaxInterfaceEnv names.
inline constexpr std::size_t kMaxReleaseProcesses = 1024;
inline constexpr std::size_t kMaxInterfaceEnv = 16;
struct Release {
  std::map<std::string, std::string> env;
  std::map<std::string, std::string> files;  // plain file name (no '/', not . or ..) -> content
  std::vector<std::map<std::string, std::string>> processes{};  // per process: env over `env`
  std::vector<std::string> interface_env{};  // set to the registered address's interface
};

nlohmann::json to_json(const AgentRegistration& r);
Result<AgentRegistration> registration_from_json(const nlohmann::json& j);
nlohmann::json to_json(const AgentRegistered& r);
Result<AgentRegistered> registered_from_json(const nlohmann::json& j);
nlohmann::json to_json(const AgentHeartbeatReply& r);
// heartbeat_s, when present, is a number of seconds in
// [kMinHeartbeatInterval, kMaxHeartbeatInterval] (field "heartbeat_s").
Result<AgentHeartbeatReply> heartbeat_reply_from_json(const nlohmann::json& j);
nlohmann::json to_json(const AgentExit& e);
Result<AgentExit> exit_from_json(const nlohmann::json& j);
nlohmann::json to_json(const Release& r);
Result<Release> release_from_json(const nlohmann::json& j);
// The file names of `r` are plain names (field "files"); `processes` holds
// at most kMaxReleaseProcesses entries of valid variable names (field
// "processes"); `interface_env` at most kMaxInterfaceEnv valid names (field
// "interface_env").
Status validate_release(const Release& r);
// (A heartbeat's request body is {}.)

}  // namespace muster::api
