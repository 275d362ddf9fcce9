// World: musterd's side of the world rendezvous of one elastic cluster (the
// protocol is clusterspec/rendezvous_protocol.h): which workers form which
// generation, with which ranks, and the key-value exchange each generation's
// ranks use to connect (a KvBootstrap in the runtime).
//
// Words
// - admitted: a worker the cluster released into the world (an initial rank
//   or a replacement) and that is still alive. The ClusterManager admits and
//   removes workers; nobody else can join.
// - generation g: a numbered set of members in rank order, formed once and
//   never changed. A generation *breaks* when one of its members dies, ends
//   or asks to join the next one (its world failed: HorovodInternalError, or
//   it was interrupted: HostsUpdatedInterrupt); the KV of a broken generation
//   refuses every call from then on, naming why.
// - round: the joiners waiting for generation g+1.
//
// When g+1 forms (form_locked):
//   a) every admitted member of g has joined the round (for g = 0: every
//      admitted worker), and at least min_np workers joined; or
//   b) g broke at least rejoin_timeout ago and min_np workers joined: the
//      members of g that did not join are *left out* (an Excluded event; the
//      manager stops them), so one hung rank cannot hold the others forever.
//   A round of newcomers alone (g is whole) waits for the members, who learn
//   of it from world() ("changed") at their next check and then join.
//   Ranks: the members of g that joined keep their order (the lowest of them
//   becomes rank 0, so the state broadcast comes from a rank that has it),
//   then newcomers in admission order, at most max_np; a newcomer that does
//   not fit waits for the next round.
// A joiner from a stale generation (it names g' < g and is not a member of
// g: the world went on without it) is refused; a member of g that names an
// earlier generation gets g's assignment again (its answer was lost).
// After a daemon restart (restore()) the saved generation may lag the one
// the ranks hold, as a formation is answered before the next save: a joiner
// naming g' > g then moves the world to g' (broken, as its KV is lost), the
// joiners naming g' are its members, any other is a newcomer (it takes the
// state from them), and g'+1 waits for every admitted worker, as the first
// generation does, or for rejoin_timeout.
// Each generation's key-value exchange is a GenerationKv (generation_kv.h);
// the World decides who may use it (check_kv_locked).
//
// Threads: every method may be called from any thread; one mutex guards the
// state. Callbacks (a parked join, get or world answer) run after it is
// released, on the caller's thread or tick()'s. Time comes from the Clock.
#pragma once

#include <chrono>
#include <functional>
#include <list>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "api/status.h"
#include "clusterspec/rendezvous_protocol.h"
#include "service/clock.h"
#include "service/elastic/generation_kv.h"

namespace muster::service::elastic {

namespace proto = clusterspec::rendezvous;

struct WorldOptions {
  std::string cluster_id;
  int min_np = 1;
  int max_np = 1;
  // A member of a broken generation that has not joined the next round by
  // then is left out (if min_np others did).
  std::chrono::milliseconds rejoin_timeout{30'000};
  // Long-polls (join, get, world) answer "not yet" after at most this.
  std::chrono::milliseconds poll_bound{25'000};
  // The values one generation may hold, in bytes (keys and values).
  size_t max_kv_bytes = 64u << 20;
};

// What happened, for the cluster's history (drained by the manager).
struct WorldEvent {
  enum class Kind { kFormed, kBroken, kExcluded, kReported };
  Kind kind = Kind::kFormed;
  TimePoint at;
  int generation = 0;
  std::vector<std::string> members;  // kFormed: in rank order
  std::string worker_id;             // kBroken: who broke it (may be ""); kExcluded: who
  std::string reason;                // kBroken, kExcluded
  int batches_redone = 0;            // kReported
  // kBroken: a member asked for a new generation (it saw a peer fail, or a
  // newcomer waiting), rather than one of them leaving; `joining` names the
  // newcomers waiting in the round then (a join, not a death).
  bool requested = false;
  std::vector<std::string> joining{};
};

class World {
 public:
  using JoinDone = std::function<void(api::Result<proto::Assignment>)>;
  using GetDone = std::function<void(api::Result<proto::KvValues>)>;
  using WorldDone = std::function<void(api::Result<proto::WorldView>)>;

  World(WorldOptions options, const Clock& clock);
  World(const World&) = delete;
  World& operator=(const World&) = delete;

  // ---- The manager's side.
  // `worker_id` may join from now on (idempotent).
  void admit(const std::string& worker_id);
  // `worker_id` is out for good (it ended, was lost, stopped, left out):
  // its round seat and parked calls go; if it was a member of the current
  // generation, that generation breaks with `reason`.
  void remove(const std::string& worker_id, const std::string& reason);
  // `worker_id` ended well (its training is done): it leaves, but its
  // generation does not break, so ranks still finishing in it go on.
  void retire(const std::string& worker_id);
  // Answers every parked call (the cluster ended) and refuses later ones.
  void close(const std::string& reason);
  bool admitted(const std::string& worker_id) const;
  // Expires long-polls at their bound and applies the rejoin timeout.
  void tick();
  std::vector<WorldEvent> drain_events();

  // ---- The ranks' side (the routes). Each either answers now or parks.
  void join(const std::string& worker_id, const proto::JoinRequest& request, JoinDone done);
  api::Status set(const std::string& worker_id, const proto::KvSet& request);
  void get(const std::string& worker_id, const proto::KvGet& request, GetDone done);
  // wait: 0 answers at once; else parks until the view changes for the
  // caller or `wait` (at most poll_bound) passed.
  void world(const std::string& worker_id, int generation, std::chrono::milliseconds wait, WorldDone done);
  api::Status report(const std::string& worker_id, const proto::Report& report);

  // ---- State, for views and the store.
  int generation() const;
  std::vector<std::string> members() const;
  int joined() const;
  // {generation, members}: what a restarted daemon needs. A restored world
  // keeps its generation and members, but not their key-value exchange: a
  // KV call of the restored generation is refused ("join again"), so ranks
  // that were still connecting re-form while the others train on.
  nlohmann::json to_record() const;
  void restore(const nlohmann::json& record);

 private:
  struct Joiner {
    uint64_t order = 0;  // admission order
    std::optional<JoinDone> parked;
    TimePoint deadline;
  };
  struct Watcher {
    std::string worker_id;
    int generation = 0;
    TimePoint deadline;
    WorldDone done;
  };
  std::string member_name_locked(const std::string& worker_id) const;  // "rank 1 (worker ab12)"
  // Refusals: the world is closed (why); `worker_id` is not admitted (why it
  // is out, or that it never was in) (conflict).
  api::Status closed_locked() const;
  api::Status outsider_locked(const std::string& worker_id) const;
  // A rank names `generation`, which has not formed (invalid_argument).
  api::Status unformed_locked(int generation) const;
  // Why a KV call of `worker_id` for `generation` is refused, if it is.
  api::Status check_kv_locked(const std::string& worker_id, int generation) const;
  void break_locked(const std::string& worker_id, const std::string& reason, Effects& fx, bool requested = false,
                    std::vector<std::string> joining = {});
  void form_locked(Effects& fx);
  // Parks `done` as worker_id's join of the next round, then tries to form.
  void enter_round_locked(const std::string& worker_id, JoinDone done, Effects& fx);
  void wake_watchers_locked(Effects& fx);
  proto::WorldView view_locked(int generation) const;
  proto::Assignment assignment_locked(const std::string& worker_id) const;
  static void run(Effects& fx);

  const WorldOptions options_;
  const Clock& clock_;

  mutable std::mutex mu_;
  std::optional<std::string> closed_;
  uint64_t next_order_ = 1;
  std::map<std::string, uint64_t> admitted_;     // worker -> admission order
  std::map<std::string, std::string> removed_;   // worker -> why it is out
  int generation_ = 0;
  std::vector<std::string> members_;             // of generation_, in rank order
  std::optional<std::string> broken_;            // why generation_ is over
  std::optional<TimePoint> broken_at_;
  bool restored_ = false;                        // KV of generation_ lost with the earlier daemon
  // The restored record lagged: a rank named a generation it never saw form
  // (the earlier daemon answered the joiners before it saved the world).
  // members_ then holds only the ranks that proved membership by naming it.
  bool lagged_ = false;
  std::map<std::string, Joiner> round_;          // waiting for generation_ + 1
  GenerationKv kv_;                              // of generation_
  std::list<Watcher> watchers_;
  std::vector<WorldEvent> events_;
};

}  // namespace muster::service::elastic
