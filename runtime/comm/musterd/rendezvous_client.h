// The runtime's side of musterd's world rendezvous (protocol:
// clusterspec/rendezvous_protocol.h): how a rank of an elastic cluster joins
// a generation of its world, swaps the bytes its Communicator needs
// (MusterdKvStore, a KvStore for a KvBootstrap), watches for a membership
// change and reports what a recovery redid. Plain sockets
// (runtime/report/http_post.h): the runtime never links the daemon.
//
// Contract
// - Every call retries while musterd cannot be reached or answers 5xx (a
//   restarting daemon), with a growing pause, until `patience` ran out; then
//   CommError naming the URL and the last failure.
// - join() long-polls until a generation after `last_generation` formed
//   with this rank in it; TimeoutError after `timeout`. musterd refusing the
//   join (a stale rank, one no longer part of the world) is an Error with
//   musterd's words: this rank cannot take part again and should end.
// - KV calls refused because their generation broke or is over are a
//   CommError (the world failed under this rank: re-join, as an elastic
//   run loop does).
// Threads: one thread at a time per client (a rank's Bootstrap, or its
// membership poller with a client of its own).
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "clusterspec/rendezvous_protocol.h"
#include "runtime/comm/bootstrap.h"
#include "runtime/report/http_post.h"

namespace muster::runtime::comm::musterd {

namespace proto = clusterspec::rendezvous;

struct RendezvousSettings {
  std::string url;  // http://host:port
  report::HttpTarget target;
  std::string worker_id;
  std::string token;
  std::string cluster_id;
  // How long a rank waits for a generation to form (MUSTER_RENDEZVOUS_TIMEOUT_MS).
  std::chrono::milliseconds timeout{600'000};
  // How long calls keep retrying an unreachable daemon.
  std::chrono::milliseconds patience{60'000};

  // From MUSTER_RENDEZVOUS_URL, MUSTER_WORKER_ID, MUSTER_RENDEZVOUS_TOKEN,
  // MUSTER_CLUSTER_ID, MUSTER_RENDEZVOUS_TIMEOUT_MS: nullopt when
  // MUSTER_RENDEZVOUS_URL is unset; InvalidArgument naming the variable when
  // one is malformed or missing.
  static std::optional<RendezvousSettings> from_env();
};

class RendezvousClient {
 public:
  explicit RendezvousClient(RendezvousSettings settings);

  proto::Assignment join(int last_generation);
  proto::WorldView world(int generation, std::chrono::milliseconds wait);
  void report(const proto::Report& report);
  void set(int generation, const std::string& key, const std::string& value);
  // One long-poll of at most `wait`: ready with the values, or the keys missing.
  proto::KvValues get(int generation, const std::vector<std::string>& keys, std::chrono::milliseconds wait);

  const RendezvousSettings& settings() const { return settings_; }

 private:
  // The answer's JSON for a 200; throws as the contract says otherwise.
  // `refusal_is_fatal`: a 409 is an Error (join) rather than a CommError.
  nlohmann::json call(const std::string& method, const std::string& what, const nlohmann::json& body,
                      std::chrono::milliseconds wait, bool refusal_is_fatal);

  RendezvousSettings settings_;
};

// A KvStore over musterd's rendezvous, scoped to one generation (the
// generation's prefix is the KvBootstrap's business). get() waits in
// long-polls of at most 25 s until every key exists or `timeout` passed:
// TimeoutError naming the keys still missing.
class MusterdKvStore final : public KvStore {
 public:
  MusterdKvStore(RendezvousSettings settings, int generation);
  void set(const std::string& key, const std::string& value) override;
  std::vector<std::string> get(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override;

 private:
  RendezvousClient client_;
  int generation_;
};

}  // namespace muster::runtime::comm::musterd

namespace muster::runtime::comm::musterd {

// The musterd case of bootstrap_from_env(): a rank of an elastic cluster
// (MUSTER_RENDEZVOUS_URL set) joins the generation after the last one this
// process was in, and gets the KvStore of that generation for its
// KvBootstrap. nullopt when MUSTER_RENDEZVOUS_URL is unset. A world torn
// down and created again in the same process (an elastic reset) thus
// re-forms as the next generation.
struct Joined {
  proto::Assignment assignment;
  std::shared_ptr<KvStore> store;
  RendezvousSettings settings;
};
std::optional<Joined> join_from_env();

// The generation this process joined last (0: none), and its size and rank.
proto::Assignment last_assignment();

}  // namespace muster::runtime::comm::musterd
