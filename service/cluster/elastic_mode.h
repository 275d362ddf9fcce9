// ElasticMode: the elastic mode of clusters, behind the ClusterMode
// interface (mode.h). musterd launches every rank itself, one worker
// each; the ranks form their world through musterd's rendezvous
// (service/elastic/world.h, protocol clusterspec/rendezvous_protocol.h), and
// the world outlives any one of them.
//
//   a) plan: n_workers held workers running the worker script (python3).
//   b) wire, once all registered: each is admitted to the cluster's World
//      and released with MUSTER_RENDEZVOUS_* (the daemon's URL, the
//      worker's script token, the start timeout, min_np/max_np); generation
//      1 forms when they all joined.
//   c) supervise, every pass while running (the manager's thread):
//      - a rank that ended badly (failed, lost, stopped, timed out) leaves
//        the World (its generation breaks; the survivors, whose collective
//        failed, re-form as the next generation) and is recorded as a death
//        of its generation; its host's failures are counted, and a host
//        that fails kFailuresToBlacklist times is blacklisted (for a cooldown
//        drawn as Horovod does in blacklist_cooldown_range, else for good);
//      - a replacement is launched under the same task index (a held worker;
//        later if its host is cooling down), up to n_workers alive ranks and
//        never more than max_np; once registered it is admitted and
//        released, joins at the next generation and receives the state from
//        a survivor. One that registers from a blacklisted host is stopped;
//      - the World's events become the cluster's generations: formed (with
//        the recovery time from the break), broken (why, when), left out (a
//        hung member: stopped), reported (batches redone, time to resume);
//      - the cluster fails when the world would re-form past reset_limit,
//        when fewer than min_np ranks are alive for longer than the start
//        timeout (start_timeout, else timeout_seconds), or when every member
//        of the last generation died (nobody holds the training state),
//        naming each death; it succeeds once a member succeeded and every
//        member of the last generation ended with exit code 0.
//   d) log: rank 0's worker log (the current task 0).
// A restarted daemon takes a running elastic cluster back (resume): its
// World keeps generation and members (not the key-value exchange), the
// agents re-register, pending replacements are released when they do.
#pragma once

#include <chrono>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "service/clock.h"
#include "service/elastic/host_blacklist.h"
#include "service/elastic/world.h"
#include "service/cluster/mode.h"

namespace muster::service {

struct ElasticModeOptions {
  std::filesystem::path project_dir;  // canonical: scripts resolve inside it
  // A member of a broken generation that has not rejoined by then is left out.
  std::chrono::milliseconds rejoin_timeout{30'000};
  int failures_to_blacklist = 2;      // failures of the cluster's workers on one host
};

class ElasticMode final : public ClusterMode {
 public:
  // `registry` and `clock` are borrowed and outlive this.
  ElasticMode(ElasticModeOptions options, WorkerRegistry& registry, const Clock& clock);

  api::Result<Plan> plan(const std::string& cluster_id, const api::ClusterRequest& request) override;
  bool may_end(const api::ClusterTask& task, const api::Worker& worker) const override;
  api::Result<Wiring> wire(const api::Cluster& cluster, const std::vector<api::Worker>& workers) override;
  std::optional<Verdict> verdict(const api::Cluster& cluster, const std::vector<api::Worker>& workers,
                                 std::optional<int> launcher_exit) const override;
  LogSource log(const api::Cluster& cluster) const override;
  Supervision supervise(api::Cluster& cluster, const std::vector<api::Worker>& workers) override;
  void ended(const api::Cluster& cluster) override;
  bool resume(api::Cluster& cluster) override;

  // The World of a running elastic cluster (the rendezvous routes), or null.
  std::shared_ptr<elastic::World> world(const std::string& cluster_id) const;

 private:
  // What the mode keeps per cluster, beside its World. Touched only on the
  // manager's thread (wire, supervise, ended, resume), so unlocked.
  struct State {
    std::shared_ptr<elastic::World> world;
    std::set<std::string> settled;                 // workers whose ending was handled
    std::map<std::string, size_t> pending;         // replacement -> task index, not yet released
    std::map<std::string, std::string> left_out;   // worker -> why the World left it out
    std::unique_ptr<elastic::HostBlacklist> blacklist;
    std::vector<std::pair<size_t, TimePoint>> deferred;  // task index, not before
    std::map<int, TimePoint> broke_at;             // generation -> when it broke
    // generation -> the reason it broke, when a member asked for a new one
    // having seen a peer fail: the death, once the manager learns of it,
    // goes first in the generation's end_reason (explain_breaks()).
    std::map<int, std::string> asked;
    std::optional<TimePoint> below_min_since;
    bool finishing = false;                        // a member succeeded
  };

  // A rank that died, for its replacement: its task index and its worker.
  struct Dead {
    size_t task = 0;
    std::string worker_id;
  };
  // Who is left after a pass's endings: the live ranks in the world, and
  // whether the training state is gone (every member of the current
  // generation died, or every rank before the first one formed).
  struct Census {
    std::vector<std::string> members;  // of the current generation, in rank order
    int alive = 0;
    bool never_formed = false;
    bool state_lost = false;
  };

  elastic::WorldOptions world_options(const api::Cluster& cluster) const;
  std::map<std::string, std::string> rank_env(const api::Cluster& cluster, const std::string& worker_id) const;
  // Launches a held worker for task `index` (records the replacement of `replaced`).
  void replace(api::Cluster& c, State& st, size_t index, const std::string& replaced, Supervision& sup);
  void release(api::Cluster& c, State& st, const std::string& worker_id);
  // A new cluster's state: its World and its host blacklist.
  std::shared_ptr<State> new_state(const api::Cluster& cluster);
  // The steps of supervise() (elastic_mode.cc names them a) to g)).
  std::shared_ptr<State> state_of(const std::string& cluster_id) const;
  void record_start(api::Cluster& c, TimePoint now, Supervision& sup) const;
  void release_registered(api::Cluster& c, State& st, const std::vector<api::Worker>& workers, TimePoint now,
                          Supervision& sup);
  std::vector<Dead> settle_endings(api::Cluster& c, State& st, const std::vector<api::Worker>& workers, TimePoint now,
                                   Supervision& sup);
  Census take_census(const api::Cluster& c, const State& st, const std::vector<api::Worker>& workers) const;
  void replace_dead(api::Cluster& c, State& st, const std::vector<Dead>& dead, TimePoint now, Supervision& sup);
  // A member succeeded: the cluster succeeds once every member of the last
  // generation ended with exit code 0, and fails when one ended otherwise.
  std::optional<Verdict> finished_verdict(const Census& census, const std::vector<api::Worker>& workers) const;
  // Otherwise: it fails when the training state is lost, or below min_np
  // for longer than the start timeout (tracked in st.below_min_since).
  std::optional<Verdict> failed_verdict(const api::Cluster& c, State& st, const Census& census, TimePoint now) const;
  void apply_events(api::Cluster& c, State& st, Supervision& sup);
  void explain_breaks(api::Cluster& c, State& st, TimePoint now, Supervision& sup);
  void save(api::Cluster& c, const State& st) const;

  ElasticModeOptions options_;
  WorkerRegistry& registry_;
  const Clock& clock_;
  std::mt19937 rng_{std::random_device{}()};

  mutable std::mutex mu_;  // guards the map (routes look worlds up from HTTP threads)
  std::map<std::string, std::shared_ptr<State>> clusters_;
};

}  // namespace muster::service
