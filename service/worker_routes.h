// The user-facing worker routes (/api/v1/workers...) and /healthz.
// Each handler: validate the body (validation.h) -> one registry call ->
// JSON reply. Await replies later, from the registry's callback.
#pragma once

#include "muster/service/registry.h"
#include "muster/service/router.h"
#include "muster/service/validation.h"

namespace muster::service {

void register_worker_routes(Router& router, WorkerRegistry& registry, ValidationOptions validation);

// The last `lines` lines of a file (0: all of it, at most the last 1 MiB).
std::string tail_file(const std::filesystem::path& path, size_t lines);

// The `tail` query of a logs route (absent: 0 = all lines); 400
// (invalid_argument, field "tail") unless a whole number >= 0. Shared by
// GET /api/v1/workers/{id}/logs and GET /api/v1/clusters/{id}/logs.
api::Result<size_t> parse_tail(const Request& req);

// A text/plain reply with the last `lines` lines of `path` (empty text when
// the file does not exist yet).
Response log_response(const std::filesystem::path& path, size_t lines);

}  // namespace muster::service
