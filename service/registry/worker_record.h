// WorkerRecord: what the registry keeps per worker, and its stored form (one
// row of the Store's workers table, a JSON object). The worker object itself
// is api::Worker; the rest is the daemon's own: the agent's token, the
// cluster options, the release, where the log is and which process runs the
// agent (so that a restarted daemon can reach it again).
//
// Contract: record_from_json(record_to_json(r), r.seq) gives back every
// stored field of r; the monotonic times (launched_at, last_heartbeat,
// finished) are not stored (a restarted daemon counts its timeouts from its
// own start, and a finished worker's age from its finished_at), nor are
// `heartbeat_every`, `launching`, `waiting`, `stopping` and `held_exit`
// (work in flight does not survive a restart).
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "api/agent_protocol.h"
#include "api/worker.h"
#include "service/clock.h"

namespace muster::service {

struct WorkerRecord {
  api::Worker worker;
  uint64_t seq = 0;  // launch order
  std::string agent_token;
  bool hold = false;
  bool reserve_port = false;
  std::optional<api::Release> release;
  TimePoint launched_at;     // startup timeout counts from here
  TimePoint last_heartbeat;  // heartbeat timeout counts from here
  // The interval the agent was last told (registry.h, "Heartbeats at fleet
  // scale"); zero: the base interval (none told yet).
  std::chrono::milliseconds heartbeat_every{0};
  TimePoint running_since{}; // when it became running (await's settle time counts from here)
  std::filesystem::path log_path;
  std::string process;       // Backend::process_identity(), for a later daemon
  bool launching = false;    // its batch is with the backend right now
  bool waiting = false;      // `scheduling` until its host has room (admission, registry.h)
  bool stopping = false;     // stop() is signalling its process tree right now
  std::string stop_reason;   // ... and the reason it gives
  // ... and the status it ends in: `stopped`, or (a cluster's host whose
  // ranks ended, mpi) `succeeded` / `failed` with its ranks' exit code.
  api::WorkerStatus stop_as = api::WorkerStatus::kStopped;
  std::optional<int> stop_exit_code;
  TimePoint finished{};      // when it reached a terminal status (retention)
  // An exit the agent reported before the backend's copy of its log was
  // complete (workers::Backend::log_complete): applied once it is, or at
  // `until` (registry.h, "Logs that trail the exit").
  struct HeldExit {
    int exit_code = 0;
    bool out_of_memory = false;
    TimePoint until{};
  };
  std::optional<HeldExit> held_exit;
};

nlohmann::json record_to_json(const WorkerRecord& r);
// The record, or why `j` is not one (a row of a future or broken version is
// skipped and logged, never guessed at).
api::Result<WorkerRecord> record_from_json(const nlohmann::json& j, uint64_t seq);

}  // namespace muster::service
