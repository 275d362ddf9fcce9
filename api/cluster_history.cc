#include "api/cluster_history.h"

#include <algorithm>

namespace muster::api {

using nlohmann::json;

namespace {

json optional_json(const std::optional<std::string>& v) { return v ? json(*v) : json(nullptr); }

}  // namespace

json to_json(const ClusterGeneration& g) {
  json deaths = json::array();
  for (const auto& d : g.deaths) {
    deaths.push_back({{"worker_id", d.worker_id}, {"task", d.task}, {"reason", d.reason}, {"at", d.at}});
  }
  json replacements = json::array();
  for (const auto& r : g.replacements) replacements.push_back({{"replaced", r.replaced}, {"by", r.by}, {"at", r.at}});
  return {{"generation", g.generation},
          {"cause", g.cause},
          {"started_at", g.started_at},
          {"members", g.members},
          {"size", g.members.size()},
          {"ended_at", optional_json(g.ended_at)},
          {"end_reason", g.end_reason},
          {"deaths", deaths},
          {"replacements", replacements},
          {"recovery_seconds", g.recovery_seconds ? json(*g.recovery_seconds) : json(nullptr)},
          {"resume_seconds", g.resume_seconds ? json(*g.resume_seconds) : json(nullptr)},
          {"batches_redone", g.batches_redone ? json(*g.batches_redone) : json(nullptr)}};
}

Result<ClusterGeneration> generation_from_json(const json& j) {
  try {
    ClusterGeneration g;
    g.generation = j.at("generation").get<int>();
    g.cause = j.at("cause").get<std::string>();
    g.started_at = j.value("started_at", "");
    g.members = j.value("members", std::vector<std::string>{});
    if (j.contains("ended_at") && j["ended_at"].is_string()) g.ended_at = j["ended_at"].get<std::string>();
    g.end_reason = j.value("end_reason", "");
    for (const auto& d : j.value("deaths", json::array())) {
      g.deaths.push_back({d.value("worker_id", ""), d.value("task", ""), d.value("reason", ""), d.value("at", "")});
    }
    for (const auto& r : j.value("replacements", json::array())) {
      g.replacements.push_back({r.value("replaced", ""), r.value("by", ""), r.value("at", "")});
    }
    if (j.contains("recovery_seconds") && j["recovery_seconds"].is_number()) {
      g.recovery_seconds = j["recovery_seconds"].get<double>();
    }
    if (j.contains("resume_seconds") && j["resume_seconds"].is_number()) g.resume_seconds = j["resume_seconds"].get<double>();
    if (j.contains("batches_redone") && j["batches_redone"].is_number_integer()) {
      g.batches_redone = j["batches_redone"].get<int>();
    }
    return g;
  } catch (const json::exception& e) {
    return internal_error(std::string("stored cluster generation is malformed: ") + e.what());
  }
}

std::string describe(const GenerationDeath& d) {
  return d.task + " (worker " + d.worker_id + ") " + d.reason;
}

std::string deaths_text(const std::vector<ClusterGeneration>& history) {
  std::string out;
  for (const auto& g : history) {
    for (const auto& d : g.deaths) out += (out.empty() ? "" : "; ") + describe(d) + " at " + d.at;
  }
  return out;
}

std::vector<ClusterEvent> events_of(const std::vector<ClusterGeneration>& history) {
  std::vector<ClusterEvent> out;
  for (size_t i = 0; i < history.size(); ++i) {
    const ClusterGeneration& g = history[i];
    if (i > 0) {
      const ClusterGeneration& before = history[i - 1];
      const std::string ranks = std::to_string(g.members.size()) + (g.members.size() == 1 ? " rank" : " ranks");
      const std::string which = " (generation " + std::to_string(g.generation) + ")";
      if (g.cause == "restart") {
        out.push_back({g.started_at, "restart", "restart " + std::to_string(g.generation - 1) +
                                                    ": every rank launched again" + which});
      } else {
        // Newcomers: members the generation before did not have (a
        // replacement launched in any earlier generation, or a new rank).
        std::string joined;
        for (const auto& m : g.members) {
          if (std::find(before.members.begin(), before.members.end(), m) == before.members.end()) {
            joined += (joined.empty() ? "" : ", ") + m;
          }
        }
        out.push_back({g.started_at, "formed",
                       joined.empty() ? "going on with " + ranks + which
                                      : "replacement " + joined + " joined: " + ranks + which});
      }
    }
    for (const auto& d : g.deaths) out.push_back({d.at, "death", describe(d)});
  }
  // Deaths come before the re-formation they caused.
  std::stable_sort(out.begin(), out.end(), [](const ClusterEvent& a, const ClusterEvent& b) { return a.at < b.at; });
  return out;
}

nlohmann::json to_json(const ClusterEvent& e) { return {{"at", e.at}, {"kind", e.kind}, {"text", e.text}}; }

}  // namespace muster::api
