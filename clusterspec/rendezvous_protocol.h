// The world rendezvous protocol, defined once: how the ranks of a cluster
// that musterd launches itself (mode "elastic") form their world through
// musterd, one generation at a time. musterd answers it
// (service/cluster/rendezvous_routes.cc over service/elastic/world.h); the runtime
// speaks it (runtime/comm/musterd/). Both build and read the bodies with
// the functions here, so nothing else spells a field or a variable.
//
// A rank's conversation (every path below /api/v1/agent/workers/{id}/,
// {id} = the rank's own worker id, bearer = MUSTER_RENDEZVOUS_TOKEN):
//   a) POST rendezvous/join {generation: the last one it was in, 0 = none}
//      -> {ready: false} (ask again: a long-poll bound passed) or {ready:
//      true, generation, rank, size, prefix} once the next generation formed
//      (prefix "<cluster>/<generation>": the KvBootstrap of that world);
//   b) POST rendezvous/kv/set {generation, key, value} and POST
//      rendezvous/kv/get {generation, keys, timeout_ms} -> {ready, values |
//      missing}: the bytes a Bootstrap swaps (values base64 on the wire);
//      keys are written once;
//   c) GET rendezvous/world?generation=G&wait_ms=W -> {generation, changed,
//      size, waiting}: whether generation G is over or a newcomer waits
//      (HostsUpdatedInterrupt), answered at once or when it changes;
//   d) POST rendezvous/report {generation, batches_redone, resumed}: what
//      the new world redid, for the cluster's history.
// A call naming a generation that is over is refused (409, the message says
// which generation the world is at and to join again); a worker that is no
// longer part of the world (it ended, was lost or left out) is refused (409).
//
// Errors: every *_from_json throws SpecError naming the field.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "api/base/worker_env.h"

namespace muster::clusterspec::rendezvous {

// ---- What a rank of an elastic cluster finds in its environment (the
// names and their meanings: api/base/worker_env.h): musterd's URL and the
// bearer of the calls above, the rank's worker (set for every worker) and
// cluster, how long it waits for a generation to form, the world's bounds.
using base::kEnvClusterId;
using base::kEnvElasticMaxNp;
using base::kEnvElasticMinNp;
using base::kEnvRendezvousTimeoutMs;
using base::kEnvRendezvousToken;
using base::kEnvRendezvousUrl;
using base::kEnvWorkerId;

// "/api/v1/agent/workers/<id>/rendezvous/<call>": call is "join", "kv/set",
// "kv/get", "world" or "report".
std::string path(const std::string& worker_id, const std::string& call);

struct JoinRequest {
  int generation = 0;  // the last generation this rank was in; 0 = none yet
};

struct Assignment {
  bool ready = false;  // false: no generation yet, ask again
  int generation = 0;
  int rank = 0;
  int size = 0;
  std::string prefix;  // "<cluster>/<generation>": the keys of this generation (a KvBootstrap's prefix)
};

struct KvSet {
  int generation = 0;
  std::string key;
  std::string value;  // bytes
};

struct KvGet {
  int generation = 0;
  std::vector<std::string> keys;
  int timeout_ms = 0;  // the server waits at most this (and its own bound)
};

struct KvValues {
  bool ready = false;
  std::vector<std::string> values;   // bytes, in the keys' order, when ready
  std::vector<std::string> missing;  // the keys not written yet, when not
};

struct WorldView {
  int generation = 0;  // the world's current generation (0: none formed)
  bool changed = false;  // the asked generation is over, or a newcomer waits to join
  int size = 0;          // ranks of the current generation
  int waiting = 0;       // workers waiting to join the next one
};

struct Report {
  int generation = 0;      // the generation that resumed
  int batches_redone = 0;  // steps done again since the last commit
  bool resumed = true;     // its first step completed
};

nlohmann::json to_json(const JoinRequest& r);
JoinRequest join_request_from_json(const nlohmann::json& j);
nlohmann::json to_json(const Assignment& a);
Assignment assignment_from_json(const nlohmann::json& j);
nlohmann::json to_json(const KvSet& s);
KvSet kv_set_from_json(const nlohmann::json& j);
nlohmann::json to_json(const KvGet& g);
KvGet kv_get_from_json(const nlohmann::json& j);
nlohmann::json to_json(const KvValues& v);
KvValues kv_values_from_json(const nlohmann::json& j);
nlohmann::json to_json(const WorldView& v);
WorldView world_view_from_json(const nlohmann::json& j);
nlohmann::json to_json(const Report& r);
Report report_from_json(const nlohmann::json& j);

// Bounds the server enforces (and the client respects).
inline constexpr size_t kMaxKeyBytes = 512;
inline constexpr size_t kMaxKeysPerGet = 4096;
inline constexpr int kMaxWaitMs = 30'000;  // one long-poll

}  // namespace muster::clusterspec::rendezvous
