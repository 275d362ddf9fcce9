// The logs routes' one implementation, for a worker's log
// (GET /api/v1/workers/{id}/logs, worker_routes.h) and a cluster's
// (GET /api/v1/clusters/{id}/logs, cluster/routes.h) alike; and the tail of
// a log file that failure reasons quote.
#pragma once

#include <cstddef>
#include <filesystem>
#include <functional>
#include <string>

#include "api/status.h"
#include "service/log_follower.h"
#include "service/router.h"

namespace muster::service {

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
