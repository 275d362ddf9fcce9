#include "api/cluster_request_recovery.h"

#include "api/json_integer.h"

namespace muster::api {

using nlohmann::json;

namespace {

Status bad(const std::string& field, const std::string& message) { return invalid_argument(field + " " + message, field); }

bool given(const json& body, const char* field) { return body.contains(field) && !body[field].is_null(); }

Status read_int(const json& body, const char* field, int lo, int hi, std::optional<int>* out) {
  if (!given(body, field)) return Status::ok();
  const auto n = json_integer(body[field]);
  if (!n) return bad(field, "must be an integer");
  if (*n < lo || *n > hi) {
    return bad(field, "must be in " + std::to_string(lo) + ".." + std::to_string(hi) + ", got " + std::to_string(*n));
  }
  *out = static_cast<int>(*n);
  return Status::ok();
}

}  // namespace

Status parse_recovery_fields(const json& body, int max_workers, ClusterRequest& r) {
  const bool elastic = r.mode == ClusterKind::kElastic;
  std::optional<int> restarts;
  if (auto s = read_int(body, "max_restarts", 0, kMaxRestarts, &restarts); !s) return s;
  if (restarts && elastic && *restarts > 0) {
    return bad("max_restarts", "is for ps, mpi and torchrun modes: an elastic cluster recovers without a restart (bound its "
                               "re-formations with reset_limit)");
  }
  r.max_restarts = restarts.value_or(0);

  for (const char* field : {"min_np", "max_np", "reset_limit", "blacklist_cooldown_range"}) {
    if (!elastic && given(body, field)) {
      return bad(field, "is for elastic mode only (mode \"elastic\", horovodrun's elastic flags)");
    }
  }
  if (!elastic) return Status::ok();

  if (auto s = read_int(body, "min_np", 1, r.n_workers, &r.min_np); !s) return s;
  if (auto s = read_int(body, "max_np", 1, max_workers, &r.max_np); !s) return s;
  if (r.max_np && *r.max_np < r.n_workers) {
    return bad("max_np", "must be at least n_workers (" + std::to_string(r.n_workers) +
                             "): the cluster starts with n_workers ranks, got " + std::to_string(*r.max_np));
  }
  if (auto s = read_int(body, "reset_limit", 0, 1 << 20, &r.reset_limit); !s) return s;
  if (given(body, "blacklist_cooldown_range")) {
    const json& v = body["blacklist_cooldown_range"];
    int64_t bounds[2] = {0, 0};
    for (size_t i = 0; i < 2; ++i) {
      const auto n = v.is_array() && v.size() == 2 ? json_integer(v[i]) : std::nullopt;
      if (!n) return bad("blacklist_cooldown_range", "must be [lo, hi]: two whole seconds");
      bounds[i] = *n;
    }
    const int64_t lo = bounds[0], hi = bounds[1];
    if (lo < kMinCooldownSeconds || hi > kMaxCooldownSeconds || lo > hi) {
      return bad("blacklist_cooldown_range", "must satisfy " + std::to_string(kMinCooldownSeconds) + " <= lo <= hi <= " +
                                                 std::to_string(kMaxCooldownSeconds) + ", got [" + std::to_string(lo) +
                                                 ", " + std::to_string(hi) + "]");
    }
    r.blacklist_cooldown_range = std::make_pair(static_cast<int>(lo), static_cast<int>(hi));
  }
  // Every rank is a worker musterd starts itself: nothing for mpirun.
  if (r.slots != 1) return bad("slots", "must be 1 in elastic mode: each rank is a worker of its own");
  if (!r.launch) return bad("launch", "must be true in elastic mode: musterd starts every rank itself");
  for (const char* field : {"fusion_threshold_mb", "cycle_time_ms", "timeline_filename", "verbose"}) {
    if (given(body, field)) {
      return bad(field, "is an mpirun option; an elastic cluster has no mpirun line (give HOROVOD_* in env)");
    }
  }
  return Status::ok();
}

}  // namespace muster::api
