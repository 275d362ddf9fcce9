// Worker: the object the REST API hands out, its status state machine, and
// the typed requests that service/validation.cc builds from JSON bodies.
//
// Status state machine (can_transition() is the one place it is written):
//
//   scheduling -> starting -> running -> succeeded | failed | stopped | lost
//        |            |
//        |            +-> failed | timedout | stopped | lost
//        +-> failed | stopped
//
// succeeded, failed, timedout, stopped and lost are terminal: a worker never
// leaves them. `running` means the agent registered (ip_address is known).
#pragma once

#include <chrono>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "api/status.h"

namespace muster::api {

enum class WorkerStatus {
  kScheduling,  // accepted, the backend has not been asked yet
  kStarting,    // the backend started the agent; it has not registered yet
  kRunning,     // the agent registered its IP and runs (or holds) the script
  kSucceeded,   // the script exited 0
  kFailed,      // the script exited non-zero, or the agent/backend failed
  kTimedOut,    // the agent never registered within the startup timeout
  kStopped,     // stopped through the API
  kLost,        // the agent stopped heartbeating
};

// "scheduling", "starting", ... (the wire names).
const char* worker_status_name(WorkerStatus status);
std::optional<WorkerStatus> parse_worker_status(std::string_view name);
bool is_terminal(WorkerStatus status);
bool can_transition(WorkerStatus from, WorkerStatus to);

// What ip_address says until the worker's agent registered its address.
inline constexpr char kUnknownAddress[] = "unknown";

// The worker object of the REST API (see api/openapi.yaml, schema Worker).
struct Worker {
  std::string id;
  WorkerStatus status = WorkerStatus::kScheduling;
  std::string ip_address = kUnknownAddress;
  std::optional<int> port;  // the port the agent reserved (clusters), else null
  double cpu = 1.0;
  double memory = 1.0;  // GiB
  int nvidia_gpu = 0;
  std::string kernel = "python3";
  std::string script;  // as the caller gave it, relative to the project dir
  std::optional<std::string> cluster_id;
  std::string created_at;  // RFC 3339 UTC
  std::optional<std::string> started_at;  // when it became running (kept for older clients)
  std::optional<std::string> running_at;  // cdsw's name for the same instant
  std::optional<std::string> finished_at;
  std::optional<int> exit_code;
  std::string reason;  // why the worker is in its status; "" when nothing to say
  // GPU device indices reserved on the worker's host ("" = none); what its
  // CUDA_VISIBLE_DEVICES says, e.g. "0,1".
  std::string gpu_devices;
  // How its cpu and memory limits are enforced on its host, as its agent
  // reported at register (empty before): "cpu"/"memory" -> "enforced by
  // cgroup v1" (or v2, or "by the pod") or "not enforced: <why>".
  std::map<std::string, std::string> limits{};
};

// Whether the worker's agent registered its address (ip_address is no longer
// kUnknownAddress).
bool has_address(const Worker& w);
// Running with a registered address, so its peers can reach it: what the
// registry's awaits settle on and what a cluster mode's task needs to be
// ready (service/cluster/mode.h).
bool is_reachable(const Worker& w);

// The worker as JSON. `duration` (seconds, cdsw's field) is derived here:
// running -> now - running_at; terminal after running -> finished_at -
// running_at; otherwise null. `now` defaults to the system clock.
nlohmann::json to_json(const Worker& worker);
nlohmann::json to_json(const Worker& worker, std::chrono::system_clock::time_point now);
std::optional<double> worker_duration(const Worker& worker, std::chrono::system_clock::time_point now);
// "2026-11-22T02:03:04.123Z" (RFC 3339 UTC, optional fraction) -> time point.
std::optional<std::chrono::system_clock::time_point> parse_rfc3339(const std::string& text);
// Inverse of to_json (used by the state store); names the bad field.
Result<Worker> worker_from_json(const nlohmann::json& j);

// Kernels: how the agent runs the script (documented in api/openapi.yaml).
inline constexpr const char* kKernelPython3 = "python3";       // .py with python3 -u, .sh with bash,
                                                               // other executables directly; code: python3 -c
inline constexpr const char* kKernelBash = "bash";             // script or code with bash
inline constexpr const char* kKernelExecutable = "executable";  // the script file is executed directly

// POST /api/v1/workers, validated.
struct LaunchRequest {
  int n = 1;
  double cpu = 1.0;
  double memory = 1.0;
  int nvidia_gpu = 0;
  std::string kernel = kKernelPython3;
  std::string script;                  // as given
  std::filesystem::path script_path;   // canonical, inside the project dir ("" with code)
  std::string code;                    // "" when script is given (script wins, as in cdsw)
  std::vector<std::string> warnings;   // accepted, but worth telling the caller (201 "warnings")
  std::map<std::string, std::string> env;
  std::vector<std::string> args;
  std::string python{};                // the interpreter (api/kernel.h, PYTHON); "" = /usr/bin/python3
};

// The form of a script path alone (relative, no `..` part, not empty), for
// requests checked before the project directory is looked at (clusters) and
// first thing when a script is resolved; the error names `field`.
Status check_script_path(const std::string& script, const std::string& field);

// POST /api/v1/workers/await, validated.
struct AwaitRequest {
  std::vector<std::string> ids;
  bool wait_for_completion = true;
  double timeout_seconds = 60;  // 0: no timeout
};

// POST /api/v1/workers/stop, validated. Empty ids: every worker.
struct StopRequest {
  std::vector<std::string> ids;
};

}  // namespace muster::api
