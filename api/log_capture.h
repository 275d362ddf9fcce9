// Log capture, the part of the agent protocol (api/agent_protocol.h) that
// says where a worker's output goes and how big it may grow. Defined once:
// the registry writes it (service/registry/launch.cc), the agent and the
// cluster launcher's relay read it (workers/agent/main.cc), the ssh backend
// takes it out of a remote agent's environment (workers/ssh/).
//
// - The agent's environment: MUSTER_LOG_FILE (absolute path), with
//   MUSTER_LOG_MAX_BYTES and MUSTER_LOG_KEEP (base::RotatingLogOptions).
//   Given MUSTER_LOG_FILE, the agent writes its own and its script's output
//   through a relay process into that file, with the cap and rotation of
//   api/base/rotating_log.h. Without it (a remote agent whose host does not
//   see the daemon's files) output goes to the agent's stdout as before and
//   whoever reads that stdout caps it.
// - The relay's command line: <agent> --log-relay PATH --max-bytes N --keep K
//   copies its stdin into PATH the same way until end of file (the cluster
//   launcher's output: mpirun's log).
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "api/base/rotating_log.h"
#include "api/base/worker_env.h"
#include "api/status.h"

namespace muster::api {

using base::kEnvLogFile;  // the names: api/base/worker_env.h
using base::kEnvLogKeep;
using base::kEnvLogMaxBytes;
inline constexpr const char* kLogRelayFlag = "--log-relay";

struct LogCapture {
  std::string path;  // absolute
  base::RotatingLogOptions options;
};

// Sets the three variables in `env`.
void add_log_capture_env(std::map<std::string, std::string>& env, const LogCapture& capture);
// Removes them (a backend whose agents cannot write the daemon's files).
void remove_log_capture_env(std::map<std::string, std::string>& env);
// nullopt when MUSTER_LOG_FILE is unset; an error names the variable at
// fault (a relative path, a number that is not a whole number in range).
Result<std::optional<LogCapture>> parse_log_capture_env(const std::map<std::string, std::string>& env);

std::vector<std::string> to_log_relay_argv(const std::string& agent_path, const LogCapture& capture);
// nullopt when argv[1] is not --log-relay; an error names the flag at fault.
Result<std::optional<LogCapture>> parse_log_relay_argv(const std::vector<std::string>& argv);

}  // namespace muster::api
