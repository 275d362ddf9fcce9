#include "service/cluster/elastic_mode.h"

#include <algorithm>

#include <spdlog/spdlog.h>

#include "api/base/worker_env.h"
#include "clusterspec/cluster_spec.h"
#include "clusterspec/rendezvous_protocol.h"
#include "service/cluster/tasks.h"

namespace muster::service {

namespace fs = std::filesystem;
namespace proto = clusterspec::rendezvous;
using api::WorkerStatus;
using nlohmann::json;

namespace {

// How a rank's worker ended, as the rest of a sentence.
std::string ending(const api::Worker& w) {
  const std::string why = w.reason.empty() ? "" : ": " + w.reason;
  switch (w.status) {
    case WorkerStatus::kFailed:
      if (w.exit_code && *w.exit_code > 128 && *w.exit_code < 160) {
        return "was killed by signal " + std::to_string(*w.exit_code - 128);
      }
      if (w.exit_code) return "failed with exit code " + std::to_string(*w.exit_code);
      return "failed" + why;
    case WorkerStatus::kTimedOut: return "timed out" + why;
    case WorkerStatus::kLost: return "was lost" + why;
    case WorkerStatus::kStopped: return "was stopped" + why;
    case WorkerStatus::kSucceeded: return "finished (exit code 0)";
    default: return std::string("is ") + api::worker_status_name(w.status);
  }
}

// The start timeout: how long the world may stay below min_np.
std::chrono::milliseconds start_timeout(const api::ClusterRequest& r) {
  if (r.start_timeout) return std::chrono::seconds(*r.start_timeout);
  if (r.timeout_seconds > 0) return std::chrono::milliseconds(static_cast<int64_t>(r.timeout_seconds * 1000));
  return std::chrono::hours(24 * 365);
}

bool contains(const std::vector<std::string>& v, const std::string& x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

// The generation `worker_id` was last a member of, else the current one.
api::ClusterGeneration* generation_of(api::Cluster& c, const std::string& worker_id) {
  for (auto it = c.generations.rbegin(); it != c.generations.rend(); ++it) {
    if (contains(it->members, worker_id)) return &*it;
  }
  return c.generations.empty() ? nullptr : &c.generations.back();
}

std::string rank_name(const api::ClusterGeneration* g, const std::string& worker_id, size_t task_index) {
  if (g) {
    auto it = std::find(g->members.begin(), g->members.end(), worker_id);
    if (it != g->members.end()) return "rank " + std::to_string(it - g->members.begin());
  }
  return "worker task " + std::to_string(task_index);
}

}  // namespace

ElasticMode::ElasticMode(ElasticModeOptions options, WorkerRegistry& registry, const Clock& clock)
    : options_(std::move(options)), registry_(registry), clock_(clock) {}

api::Result<Plan> ElasticMode::plan(const std::string& id, const api::ClusterRequest& request) {
  auto ranks = task_launch_request(request, {request.n_workers, request.worker_script, request.args, "worker_script",
                                             options_.project_dir});
  if (!ranks) return ranks.status();
  Plan plan;
  plan.script_path = ranks->script_path;
  plan.batches.push_back({clusterspec::kWorker, task_batch(id, std::move(ranks).value(), true, false)});
  return plan;
}

bool ElasticMode::may_end(const api::ClusterTask& /*task*/, const api::Worker& /*worker*/) const {
  return true;  // supervise() decides what every ending means
}

elastic::WorldOptions ElasticMode::world_options(const api::Cluster& c) const {
  elastic::WorldOptions o;
  o.cluster_id = c.id;
  o.min_np = c.request.min_np.value_or(c.request.n_workers);
  o.max_np = c.request.max_np.value_or(c.request.n_workers);
  o.rejoin_timeout = options_.rejoin_timeout;
  return o;
}

std::map<std::string, std::string> ElasticMode::rank_env(const api::Cluster& c, const std::string& id) const {
  const auto timeout = start_timeout(c.request);
  std::map<std::string, std::string> env = {
      {proto::kEnvRendezvousUrl, registry_.agent_url()},
      {proto::kEnvRendezvousToken, registry_.metrics_token(id)},
      {proto::kEnvRendezvousTimeoutMs, std::to_string(timeout.count())},
      {proto::kEnvElasticMinNp, std::to_string(c.request.min_np.value_or(c.request.n_workers))},
      {proto::kEnvElasticMaxNp, std::to_string(c.request.max_np.value_or(c.request.n_workers))}};
  // The TCP transport between hosts uses the interfaces the request names.
  if (!c.request.network_interfaces.empty()) env[base::kEnvCommTcpInterface] = c.request.network_interfaces.front();
  return env;
}

api::Result<Wiring> ElasticMode::wire(const api::Cluster& c, const std::vector<api::Worker>& workers) {
  auto st = new_state(c);
  Wiring wiring;
  for (const auto& w : workers) {
    st->world->admit(w.id);
    Release r;
    r.env = rank_env(c, w.id);
    wiring.releases.emplace_back(w.id, std::move(r));
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    clusters_[c.id] = st;
  }
  wiring.summary = "releasing " + std::to_string(workers.size()) + " ranks into musterd's rendezvous (min_np " +
                   std::to_string(c.request.min_np.value_or(c.request.n_workers)) + ", max_np " +
                   std::to_string(c.request.max_np.value_or(c.request.n_workers)) + ")";
  return wiring;
}

std::optional<Verdict> ElasticMode::verdict(const api::Cluster&, const std::vector<api::Worker>&,
                                                  std::optional<int>) const {
  return std::nullopt;  // supervise() decides
}

LogSource ElasticMode::log(const api::Cluster& c) const {
  LogSource source;
  if (!c.generations.empty() && !c.generations.back().members.empty()) {
    source.worker_id = c.generations.back().members.front();
  } else if (!c.tasks.empty()) {
    source.worker_id = c.tasks.front().worker_id;
  }
  return source;
}

std::shared_ptr<elastic::World> ElasticMode::world(const std::string& cluster_id) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = clusters_.find(cluster_id);
  return it == clusters_.end() ? nullptr : it->second->world;
}

void ElasticMode::ended(const api::Cluster& c) {
  std::shared_ptr<State> st;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = clusters_.find(c.id);
    if (it == clusters_.end()) return;
    st = it->second;
    clusters_.erase(it);
  }
  st->world->close(std::string("the cluster ") + api::cluster_status_name(c.status) +
                   (c.reason.empty() ? "" : ": " + c.reason));
}

std::shared_ptr<ElasticMode::State> ElasticMode::new_state(const api::Cluster& c) {
  auto st = std::make_shared<State>();
  st->world = std::make_shared<elastic::World>(world_options(c), clock_);
  // Horovod's cooldown draw, U(0, 1), from the mode's generator.
  st->blacklist = std::make_unique<elastic::HostBlacklist>(
      elastic::HostBlacklistOptions{options_.failures_to_blacklist, c.request.blacklist_cooldown_range},
      [this] { return std::uniform_real_distribution<double>(0.0, 1.0)(rng_); });
  return st;
}

// ---- Replacements.

void ElasticMode::replace(api::Cluster& c, State& st, size_t index, const std::string& replaced,
                                Supervision& sup) {
  // The script as the cluster's plan resolved it (a record of an earlier
  // daemon that kept none: resolved here).
  auto request = task_launch_request(c.request, {1, c.request.worker_script, c.request.args, "worker_script",
                                                 options_.project_dir, c.script_path});
  api::ClusterGeneration* g = generation_of(c, replaced);
  if (!request) {
    if (g) g->end_reason += (g->end_reason.empty() ? "" : "; ") + std::string("no replacement: ") + request.status().message();
    return;
  }
  auto launched = registry_.launch(task_batch(c.id, std::move(request).value(), true, false));
  if (!launched || launched->empty()) {
    spdlog::warn("cluster {}: cannot launch a replacement for {}: {}", c.id, replaced, launched.status().message());
    // Tried again on a later pass.
    st.deferred.emplace_back(index, clock_.now() + std::chrono::seconds(1));
    return;
  }
  const std::string by = launched->front().id;
  c.tasks[index].worker_id = by;
  st.pending[by] = index;
  if (g) g->replacements.push_back({replaced, by, format_time(clock_.wall())});
  sup.changed = true;
  spdlog::info("cluster {}: worker {} replaces {} (task {})", c.id, by, replaced, index);
}

void ElasticMode::release(api::Cluster& c, State& st, const std::string& worker_id) {
  st.world->admit(worker_id);
  Release r;
  r.env = rank_env(c, worker_id);
  // A release that fails (the worker ended meanwhile) shows up as its end.
  if (auto s = registry_.release(worker_id, std::move(r)); !s) {
    spdlog::warn("cluster {}: release of {}: {}", c.id, worker_id, s.message());
  }
}

// ---- The pass (the World's events: elastic_events.cc).

// Steps a) to g) of the pass, in this order (each on what the ones before
// it left):
//   a) the cluster's first generation is on record (its start);
//   b) the World expires its long-polls and applies the rejoin timeout;
//   c) replacements that registered are released into the world (or
//      stopped, on a blacklisted host);
//   d) ranks that ended are settled, once each: out of the world, a death
//      of their generation, a failure of their host;
//   e) the World's events become the cluster's generations (elastic_events.cc);
//   f) while someone still holds the training state, the dead are replaced;
//   g) whether the cluster ended, and how.
Supervision ElasticMode::supervise(api::Cluster& c, const std::vector<api::Worker>& workers) {
  Supervision sup;
  const std::shared_ptr<State> st_ptr = state_of(c.id);
  if (!st_ptr) return sup;
  State& st = *st_ptr;
  const TimePoint now = clock_.now();
  record_start(c, now, sup);                                           // a)
  st.world->tick();                                                    // b)
  release_registered(c, st, workers, now, sup);                        // c)
  const auto dead = settle_endings(c, st, workers, now, sup);          // d)
  apply_events(c, st, sup);                                            // e)
  explain_breaks(c, st, now, sup);
  const Census census = take_census(c, st, workers);
  if (!census.state_lost && !sup.verdict) replace_dead(c, st, dead, now, sup);  // f)
  if (!sup.verdict) {                                                  // g)
    sup.verdict = st.finishing ? finished_verdict(census, workers) : failed_verdict(c, st, census, now);
  }
  save(c, st);
  return sup;
}

std::shared_ptr<ElasticMode::State> ElasticMode::state_of(const std::string& cluster_id) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = clusters_.find(cluster_id);
  return it == clusters_.end() ? nullptr : it->second;
}

void ElasticMode::record_start(api::Cluster& c, TimePoint now, Supervision& sup) const {
  if (!c.generations.empty()) return;
  // Generation 1 is the start: its members are the first ranks, until it forms.
  api::ClusterGeneration g;
  g.generation = 1;
  g.cause = "start";
  g.started_at = format_time(to_wall(clock_, now));
  for (const auto& t : c.tasks) g.members.push_back(t.worker_id);
  c.generations.push_back(std::move(g));
  sup.changed = true;
}

void ElasticMode::release_registered(api::Cluster& c, State& st, const std::vector<api::Worker>& workers,
                                     TimePoint now, Supervision& sup) {
  for (size_t i = 0; i < c.tasks.size(); ++i) {
    const api::Worker& w = workers[i];
    auto p = st.pending.find(w.id);
    if (p == st.pending.end() || api::is_terminal(w.status) || !ready(w)) continue;
    st.pending.erase(p);
    if (st.blacklist->blacklisted(w.ip_address, now)) {
      st.left_out[w.id] = "landed on host " + w.ip_address + ", which is blacklisted";
      sup.stop.push_back(w.id);
      continue;
    }
    release(c, st, w.id);
    sup.changed = true;
  }
}

std::vector<ElasticMode::Dead> ElasticMode::settle_endings(api::Cluster& c, State& st,
                                                           const std::vector<api::Worker>& workers, TimePoint now,
                                                           Supervision& sup) {
  std::vector<Dead> to_replace;
  for (size_t i = 0; i < c.tasks.size(); ++i) {
    const api::Worker& w = workers[i];
    if (!api::is_terminal(w.status) || st.settled.count(w.id)) continue;
    st.settled.insert(w.id);
    st.pending.erase(w.id);
    sup.changed = true;
    if (w.status == WorkerStatus::kSucceeded) {
      st.world->retire(w.id);
      st.finishing = true;
      continue;
    }
    std::string reason = ending(w);
    if (auto it = st.left_out.find(w.id); it != st.left_out.end()) reason = it->second;
    st.world->remove(w.id, reason);
    api::ClusterGeneration* g = generation_of(c, w.id);
    if (g) {
      g->deaths.push_back({w.id, rank_name(g, w.id, i), reason, w.finished_at.value_or(format_time(to_wall(clock_, now)))});
    }
    spdlog::warn("cluster {}: {} (worker {}) {}", c.id, rank_name(g, w.id, i), w.id, reason);
    const std::string host = api::has_address(w) ? w.ip_address : "(unregistered)";
    if (st.blacklist->record_failure(host, now)) {
      spdlog::warn("cluster {}: host {} blacklisted ({} failures){}", c.id, host, options_.failures_to_blacklist,
                   c.request.blacklist_cooldown_range ? "" : " for the cluster's life");
    }
    if (st.finishing) continue;  // the job is done: no replacement
    if (st.blacklist->blacklisted(host, now)) {
      st.deferred.emplace_back(i, st.blacklist->until(host));
    } else {
      to_replace.push_back({i, w.id});
    }
  }
  return to_replace;
}

ElasticMode::Census ElasticMode::take_census(const api::Cluster& c, const State& st,
                                             const std::vector<api::Worker>& workers) const {
  Census out;
  out.members = st.world->members();
  bool member_alive = false;
  for (size_t i = 0; i < c.tasks.size(); ++i) {
    if (api::is_terminal(workers[i].status) || !st.world->admitted(workers[i].id)) continue;
    ++out.alive;
    if (contains(out.members, workers[i].id)) member_alive = true;
  }
  // Before the first world formed, nobody holds any state yet; but if every
  // rank died then, the script fails on its own (no world will form).
  out.never_formed = st.world->generation() == 0 && out.alive == 0;
  out.state_lost = (st.world->generation() > 0 && !member_alive) || out.never_formed;
  return out;
}

void ElasticMode::replace_dead(api::Cluster& c, State& st, const std::vector<Dead>& dead, TimePoint now,
                               Supervision& sup) {
  for (const auto& d : dead) replace(c, st, d.task, d.worker_id, sup);
  for (auto it = st.deferred.begin(); it != st.deferred.end();) {
    if (now < it->second || st.finishing) {
      ++it;
      continue;
    }
    const size_t i = it->first;
    it = st.deferred.erase(it);
    if (!st.settled.count(c.tasks[i].worker_id)) continue;  // its worker was replaced meanwhile
    replace(c, st, i, c.tasks[i].worker_id, sup);
  }
}

std::optional<Verdict> ElasticMode::finished_verdict(const Census& census,
                                                     const std::vector<api::Worker>& workers) const {
  if (census.members.empty()) return std::nullopt;
  auto status_of = [&](const std::string& id) -> std::optional<WorkerStatus> {
    for (const auto& w : workers) {
      if (w.id == id) return w.status;
    }
    auto w = registry_.get(id);
    return w ? std::optional<WorkerStatus>(w->status) : std::nullopt;
  };
  bool all_ended = true;
  for (size_t r = 0; r < census.members.size(); ++r) {
    auto s = status_of(census.members[r]);
    if (!s || !api::is_terminal(*s)) {
      all_ended = false;
    } else if (*s != WorkerStatus::kSucceeded) {
      return Verdict{api::ClusterStatus::kFailed, "rank " + std::to_string(r) + " (worker " + census.members[r] +
                                                      ") ended " + api::worker_status_name(*s) +
                                                      " after another rank had finished"};
    }
  }
  if (all_ended) return Verdict{api::ClusterStatus::kSucceeded, ""};
  return std::nullopt;
}

std::optional<Verdict> ElasticMode::failed_verdict(const api::Cluster& c, State& st, const Census& census,
                                                   TimePoint now) const {
  const int min_np = c.request.min_np.value_or(c.request.n_workers);
  if (census.never_formed) {
    return Verdict{api::ClusterStatus::kFailed,
                   "every rank died before the world first formed; deaths: " + api::deaths_text(c.generations)};
  }
  if (census.state_lost) {
    return Verdict{api::ClusterStatus::kFailed,
                   "every rank of generation " + std::to_string(st.world->generation()) +
                       " died, so nobody holds the training state; deaths: " + api::deaths_text(c.generations)};
  }
  if (census.alive >= min_np) {
    st.below_min_since.reset();
    return std::nullopt;
  }
  if (!st.below_min_since) st.below_min_since = now;
  const auto limit = start_timeout(c.request);
  if (now - *st.below_min_since < limit) return std::nullopt;
  return Verdict{api::ClusterStatus::kFailed,
                 "fewer than min_np (" + std::to_string(min_np) + ") ranks for " +
                     seconds_text(std::chrono::duration<double>(limit).count()) + " s (the start timeout): " +
                     std::to_string(census.alive) + " alive; deaths: " + api::deaths_text(c.generations)};
}

void ElasticMode::save(api::Cluster& c, const State& st) const {
  json blacklist = json::array();
  const TimePoint now = clock_.now();
  for (const auto& e : st.blacklist->entries(now)) {
    blacklist.push_back({{"host", e.host},
                         {"until", e.until == TimePoint::max() ? json(nullptr) : json(format_time(to_wall(clock_, e.until)))},
                         {"times", e.times}});
  }
  json pending = json::object();
  for (const auto& [id, index] : st.pending) pending[id] = index;
  c.elastic_state = {{"world", st.world->to_record()}, {"blacklist", blacklist}, {"pending", pending}};
}

bool ElasticMode::resume(api::Cluster& c) {
  if (c.status != api::ClusterStatus::kRunning) return false;  // still starting: its releases were not sent
  auto st = new_state(c);
  const json& saved = c.elastic_state.is_object() ? c.elastic_state : json::object();
  if (saved.contains("world")) st->world->restore(saved["world"]);
  if (saved.contains("pending") && saved["pending"].is_object()) {
    for (const auto& item : saved["pending"].items()) st->pending[item.key()] = item.value().get<size_t>();
  }
  for (const auto& t : c.tasks) {
    auto w = registry_.get(t.worker_id);
    if (!w || api::is_terminal(w->status)) continue;  // handled as an ending on the first pass
    if (!st->pending.count(t.worker_id)) st->world->admit(t.worker_id);
  }
  for (const auto& g : c.generations) {
    if (g.ended_at) {
      if (auto t = api::parse_rfc3339(*g.ended_at)) st->broke_at[g.generation] = from_wall(clock_, *t);
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  clusters_[c.id] = st;
  return true;
}

}  // namespace muster::service
