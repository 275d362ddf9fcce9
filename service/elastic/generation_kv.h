// GenerationKv: the key-value exchange of one generation of a World (steps
// b) of clusterspec/rendezvous_protocol.h): the bytes the generation's ranks
// swap to connect (a KvBootstrap in the runtime), and the gets parked until
// those bytes are there.
//
// Contract
// - Keys are written once: set() of a key already written with the same
//   value is a retried set (ok), with another value a conflict; a set that
//   would take the keys and values past max_bytes is refused
//   (kPayloadTooLarge), naming the generation.
// - get() answers at once when every key it names is written ({ready,
//   values} in the keys' order) or when it may not wait (no `until`:
//   {ready: false, missing}); else it parks until a set() completes it, or
//   until `until`, when expire() answers it with the keys still missing.
// - fail_all() answers every parked get with a status (the generation broke
//   or is over, the world closed); drop() those of one worker (it left).
//   reset() forgets every key for the next generation; a caller fails the
//   parked gets first.
// - Who may call (membership, generation, a broken or restored one) is the
//   World's to check (World::check_kv_locked): this holds bytes only.
// Threads: none of its own and no lock: the World's mutex guards every call.
// An answer is never run here: it is appended to the caller's Effects, which
// the World runs once its mutex is released.
#pragma once

#include <cstddef>
#include <functional>
#include <list>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "api/status.h"
#include "clusterspec/rendezvous_protocol.h"
#include "service/clock.h"

namespace muster::service::elastic {

// Answers to run once the World's mutex is released.
using Effects = std::vector<std::function<void()>>;

class GenerationKv {
 public:
  using GetDone = std::function<void(api::Result<clusterspec::rendezvous::KvValues>)>;

  explicit GenerationKv(size_t max_bytes) : max_bytes_(max_bytes) {}

  // `generation` names the exchange in errors.
  api::Status set(int generation, const std::string& key, const std::string& value, Effects& fx);
  void get(const std::string& worker_id, const std::vector<std::string>& keys, std::optional<TimePoint> until,
           GetDone done, Effects& fx);
  // Answers the gets whose deadline passed by `now` (ready: false, missing).
  void expire(TimePoint now, Effects& fx);
  void fail_all(const api::Status& why, Effects& fx);
  void drop(const std::string& worker_id, const api::Status& why, Effects& fx);
  void reset();

 private:
  struct Getter {
    std::string worker_id;
    std::vector<std::string> keys;
    TimePoint deadline;
    GetDone done;
  };
  // Answers the parked gets whose every key is now written.
  void wake(Effects& fx);

  const size_t max_bytes_;
  std::map<std::string, std::string> values_;
  size_t bytes_ = 0;
  std::list<Getter> getters_;
};

}  // namespace muster::service::elastic
