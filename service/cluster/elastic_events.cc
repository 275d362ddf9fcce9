// ElasticMode, what the World reports becoming the cluster's history: each
// event (formed, broken, left out, reported) into the cluster's generations,
// and a break a member asked for explained by the death behind it
// (elastic_mode.h, step c).
#include <spdlog/spdlog.h>

#include "service/cluster/elastic_mode.h"

namespace muster::service {

namespace {

double seconds_between(TimePoint from, TimePoint to) {
  return std::chrono::duration<double>(to - from).count();
}

}  // namespace

void ElasticMode::apply_events(api::Cluster& c, State& st, Supervision& sup) {
  for (const auto& e : st.world->drain_events()) {
    sup.changed = true;
    const std::string at = format_time(to_wall(clock_, e.at));
    switch (e.kind) {
      case elastic::WorldEvent::Kind::kFormed: {
        if (e.generation == 1 && !c.generations.empty() && c.generations.back().generation == 1) {
          c.generations.back().members = e.members;
          c.generations.back().started_at = at;
          break;
        }
        api::ClusterGeneration g;
        g.generation = e.generation;
        g.cause = e.generation == 1 ? "start" : "reset";
        g.started_at = at;
        g.members = e.members;
        if (auto it = st.broke_at.find(e.generation - 1); it != st.broke_at.end()) {
          g.recovery_seconds = seconds_between(it->second, e.at);
        }
        if (!c.generations.empty() && !c.generations.back().ended_at) c.generations.back().ended_at = at;
        c.generations.push_back(std::move(g));
        if (e.generation > 1) ++c.resets;
        spdlog::info("cluster {}: generation {} formed with {} ranks", c.id, e.generation, e.members.size());
        break;
      }
      case elastic::WorldEvent::Kind::kBroken: {
        st.broke_at[e.generation] = e.at;
        if (c.generations.empty() || c.generations.back().generation < e.generation) {
          // It formed under the earlier daemon, which died before saving it
          // (World::join, a lagged record): its members are not known.
          api::ClusterGeneration g;
          g.generation = e.generation;
          g.cause = "reset";
          g.started_at = !c.generations.empty() && c.generations.back().ended_at ? *c.generations.back().ended_at : at;
          if (!c.generations.empty() && !c.generations.back().ended_at) c.generations.back().ended_at = at;
          c.generations.push_back(std::move(g));
          if (e.generation > 1) ++c.resets;
        }
        for (auto& g : c.generations) {
          if (g.generation != e.generation) continue;
          g.ended_at = at;
          g.end_reason = e.reason;
        }
        if (e.requested && e.joining.empty()) st.asked[e.generation] = e.reason;
        spdlog::info("cluster {}: generation {} broke: {}", c.id, e.generation, e.reason);
        if (c.request.reset_limit && c.resets >= *c.request.reset_limit && !sup.verdict) {
          sup.verdict = Verdict{api::ClusterStatus::kFailed,
                                "generation " + std::to_string(e.generation) + " broke (" + e.reason +
                                    ") and the world may not re-form again: reset_limit " +
                                    std::to_string(*c.request.reset_limit) + " reached; deaths: " +
                                    api::deaths_text(c.generations)};
        }
        break;
      }
      case elastic::WorldEvent::Kind::kExcluded:
        st.left_out[e.worker_id] = e.reason;
        sup.stop.push_back(e.worker_id);
        spdlog::warn("cluster {}: {}; stopping it", c.id, e.reason);
        break;
      case elastic::WorldEvent::Kind::kReported:
        for (auto& g : c.generations) {
          if (g.generation != e.generation || g.batches_redone) continue;
          g.batches_redone = e.batches_redone;
          if (auto it = st.broke_at.find(e.generation - 1); it != st.broke_at.end()) {
            g.resume_seconds = seconds_between(it->second, e.at);
          }
        }
        break;
    }
  }
}

// A member that saw a peer fail often asks for a new generation before the
// manager learns of the death (the dead rank's agent reports a moment
// later): the generation then ended "rank 0 asked to form a new generation".
// Once a death of that generation is known (within kDeathWindow of the
// break), it goes first: "rank 2 (worker ab12) was killed by signal 9; then
// rank 0 (worker cd34) asked to form a new generation".
void ElasticMode::explain_breaks(api::Cluster& c, State& st, TimePoint now, Supervision& sup) {
  constexpr std::chrono::seconds kDeathWindow{30};
  for (auto it = st.asked.begin(); it != st.asked.end();) {
    api::ClusterGeneration* g = nullptr;
    for (auto& x : c.generations) {
      if (x.generation == it->first) g = &x;
    }
    auto broke = st.broke_at.find(it->first);
    const bool stale = broke == st.broke_at.end() || now - broke->second > kDeathWindow;
    if (!g || g->end_reason != it->second || stale) {
      it = st.asked.erase(it);
      continue;
    }
    if (g->deaths.empty()) {
      ++it;
      continue;
    }
    g->end_reason = api::describe(g->deaths.front()) + "; then " + it->second;
    sup.changed = true;
    it = st.asked.erase(it);
  }
}

}  // namespace muster::service
