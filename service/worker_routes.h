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

}  // namespace muster::service
