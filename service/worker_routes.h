// The user-facing worker routes (/api/v1/workers...) and /healthz.
// Each handler: validate the body (validation.h) -> one registry call ->
// JSON reply. Await replies later, from the registry's callback.
#pragma once

#include "service/log_follower.h"
#include "service/registry/registry.h"
#include "service/store_health.h"
#include "service/router.h"
#include "service/validation.h"

namespace muster::service {

// `follower` serves ?follow=true (null: such requests get 503); `health`
// (null: always ok) is what /healthz reports as degraded.
void register_worker_routes(Router& router, WorkerRegistry& registry, ValidationOptions validation,
                            LogFollower* follower = nullptr, const StoreHealth* health = nullptr);

// GET /api/v1/workers is served in pages: ?limit (1..kMaxPageSize, default
// kMaxPageSize) workers in launch order from ?page_token (the previous
// page's next_page_token). Each page is written worker by worker, never as
// one JSON document of every record.
inline constexpr size_t kMaxPageSize = 1000;

// The last `lines` lines of a file (0: all of it, at most the last 1 MiB).
std::string tail_file(const std::filesystem::path& path, size_t lines);

// Both logs routes, by the rules of log_reader.h: the last `tail` lines
// (default 1000) with a marker line when earlier output is left out;
// from_start=true the whole current file (streamed); follow=true a stream
// from there (or from ?offset=N) until `finished()` (see LogFollower).
// Headers: X-Log-Offset (the absolute offset of the first log byte),
// X-Log-Marker-Bytes (the marker's length at the start of the body). The
// query is checked (400) before `path` is asked for (404).
void serve_log(const Request& req, const Reply& reply, LogFollower* follower,
               const std::function<api::Result<std::filesystem::path>()>& path, std::function<bool()> finished);

}  // namespace muster::service
