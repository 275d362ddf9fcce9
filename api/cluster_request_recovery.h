// The recovery fields of a cluster request (api/cluster.h): max_restarts
// (ps, mpi) and the elastic mode's min_np, max_np, reset_limit and
// blacklist_cooldown_range, with what elastic mode allows of the rest.
// Called by parse_cluster_request once the other fields are read.
#pragma once

#include <nlohmann/json.hpp>

#include "api/cluster.h"
#include "api/status.h"

namespace muster::api {

// Horovod's bounds of a blacklist cooldown, in seconds.
inline constexpr int kMinCooldownSeconds = 1;
inline constexpr int kMaxCooldownSeconds = 3600;
inline constexpr int kMaxRestarts = 1000;

// Reads the fields into `r` (already parsed otherwise); the error names the field.
Status parse_recovery_fields(const nlohmann::json& body, int max_workers, ClusterRequest& r);

}  // namespace muster::api
