// A cluster's generations: its history of failures and recoveries, part of
// the Cluster object (api/cluster.h, schema ClusterGeneration in
// api/openapi.yaml), the same for every mode.
//
// - An elastic cluster's generation is one world of ranks formed through
//   musterd's rendezvous (service/elastic/world.h): generation 1 at the
//   start, and one more each time the survivors re-form (cause "reset").
// - A cluster restarted under max_restarts starts a generation per restart
//   (cause "restart"): every task is launched again.
// - A ps worker replaced under the same task index does not end its
//   generation: the replacement is listed in it.
// Each generation says who was in it, who died and why, when it ended, who
// replaced whom, how long the recovery into it took and how many batches
// its ranks did again.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "api/status.h"

namespace muster::api {

struct GenerationDeath {
  std::string worker_id;
  std::string task;    // "rank 1", "worker 0", "ps 0"
  std::string reason;  // "was killed by signal 9", "was lost: no heartbeat for 10 s"
  std::string at;      // RFC 3339
};

struct GenerationReplacement {
  std::string replaced;  // the worker that died
  std::string by;        // the worker launched in its place
  std::string at;
};

struct ClusterGeneration {
  int generation = 0;
  std::string cause;       // "start", "reset" (elastic re-formation), "restart" (max_restarts)
  std::string started_at;  // formed (elastic) or launched (restart)
  std::vector<std::string> members;  // worker ids, in rank (task) order
  std::optional<std::string> ended_at;
  std::string end_reason;
  std::vector<GenerationDeath> deaths;
  std::vector<GenerationReplacement> replacements;
  // From the end of the previous generation to this one formed (elastic) or
  // to every task running again (restart).
  std::optional<double> recovery_seconds;
  // From the end of the previous generation to this one's first completed
  // step, and the batches done again since the last commit, as its rank 0
  // reported them (elastic scripts).
  std::optional<double> resume_seconds;
  std::optional<int> batches_redone;
};

nlohmann::json to_json(const ClusterGeneration& g);
Result<ClusterGeneration> generation_from_json(const nlohmann::json& j);
// One line, for logs and failure messages: "rank 1 (worker ab12) was killed by signal 9".
std::string describe(const GenerationDeath& d);
// Every death of `history`, "; "-joined (a failed cluster's reason names them).
std::string deaths_text(const std::vector<ClusterGeneration>& history);

// What happened to a cluster, one line per event, in order, derived from its
// generations: each death ("rank 2 (worker ab12) was killed by signal 9"),
// then each re-formation ("going on with 2 ranks (generation 2)",
// "replacement cd34 joined: 3 ranks (generation 3)"), and a restart under
// max_restarts ("restart 1: every rank launched again"). The SDK, the CLI and
// the dashboard show the ones they have not shown yet, as they happen.
struct ClusterEvent {
  std::string at;    // RFC 3339
  std::string kind;  // "death", "formed", "restart"
  std::string text;
};
std::vector<ClusterEvent> events_of(const std::vector<ClusterGeneration>& history);
nlohmann::json to_json(const ClusterEvent& e);

}  // namespace muster::api
