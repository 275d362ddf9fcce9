// The user-facing worker routes (/api/v1/workers...) and /healthz.
// Each handler: validate the body (validation.h) -> one registry call ->
// JSON reply. Await replies later, from the registry's callback.
#pragma once

#include "service/log_follower.h"
#include "service/registry.h"
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

// The `tail` query of a logs route (absent: 0 = all lines); 400
// (invalid_argument, field "tail") unless a whole number >= 0. Shared by
// GET /api/v1/workers/{id}/logs and GET /api/v1/clusters/{id}/logs.
api::Result<size_t> parse_tail(const Request& req);

// A text/plain reply with the last `lines` lines of `path` (empty text when
// the file does not exist yet).
Response log_response(const std::filesystem::path& path, size_t lines);

// Both logs routes: ?tail=K (last K lines), and with ?follow=true a stream
// from ?offset=N (or the last K lines, or the start) until `finished()`
// (see LogFollower), header X-Log-Offset = the first byte's offset.
// The query is checked (400) before `path` is asked for (404).
void serve_log(const Request& req, const Reply& reply, LogFollower* follower,
               const std::function<api::Result<std::filesystem::path>()>& path, std::function<bool()> finished);

}  // namespace muster::service
