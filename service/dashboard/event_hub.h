// EventHub: server-sent events (text/event-stream) for the dashboard:
// GET /api/v1/events.
//
// Each stream starts with "retry: 2000" and a snapshot sent in bounded
// pieces: `snapshot` events {"part": k, "clusters": [...], "workers": [...],
// "complete": bool}, the clusters first, then the workers, each in id order,
// at most `piece` objects per event (part 0 replaces what the page had, the
// others add to it). Then it gets a `worker` event (the worker's JSON) on
// every worker change, a `cluster` event on every cluster change, and a
// ": heartbeat" comment every `heartbeat` so proxies and tunnels keep the
// connection open and a gone client is noticed.
//
// The pieces are read from the source one at a time, when the stream's
// queue has room (below `max_queued_bytes`): a snapshot of 20,000 workers
// never sits in memory whole, nor in a stream's queue, and a slow reader
// slows its own snapshot only. A change published while a stream's
// snapshot is under way is sent at once if the object was in a piece
// already sent, and left out otherwise (a later piece reads the object as it
// is then); changes published while a piece is being read wait until it is
// written, then follow the same rule. So no change falls between snapshot
// and events. The source is read outside the hub's mutex: publishers call in
// holding their own locks (the ClusterManager's), and the source takes them.
//
// Bounds: at most `max_streams` streams at once (one more is answered 503);
// each stream's queue is bounded by the HTTP server (a client that does not
// read is dropped, see Stream). publish() never blocks: Stream::write only
// queues. A background thread sends the snapshot pieces and the heartbeats
// and forgets closed streams; the destructor closes every stream.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "service/router.h"

namespace muster::service {

struct EventHubOptions {
  size_t max_streams = 32;
  std::chrono::milliseconds heartbeat{15'000};
  size_t piece = 200;                        // objects per snapshot event
  size_t max_queued_bytes = 512 << 10;       // a stream's queue below this takes the next piece
  std::chrono::milliseconds pace{10};        // how often pieces are sent while a snapshot is under way
};

// Where the snapshot comes from: up to `limit` objects whose id sorts after
// `after` ("": from the first), in id order, each a JSON object with "id".
struct SnapshotSource {
  using Page = std::function<std::vector<nlohmann::json>(const std::string& after, size_t limit)>;
  Page clusters;
  Page workers;
};

class EventHub {
 public:
  EventHub(EventHubOptions options, SnapshotSource source);
  ~EventHub();
  EventHub(const EventHub&) = delete;
  EventHub& operator=(const EventHub&) = delete;

  // The response of GET /api/v1/events (a stream, or 503 when full).
  Response open();
  // Sends `event` with `data` (one line of JSON) to every open stream.
  void publish(const std::string& event, const nlohmann::json& data);
  size_t stream_count() const;

 private:
  struct Client;
  void loop();
  // Sends the next pieces of one stream's snapshot while its queue has room.
  void pump(const std::shared_ptr<Client>& client);
  // Writes `chunk` to a stream still snapshotting, or leaves it out (see
  // above); under mu_.
  void route_locked(Client& c, const std::string& event, const std::string& id, const std::string& chunk);

  EventHubOptions options_;
  SnapshotSource source_;
  mutable std::mutex mu_;
  struct Held {
    std::string event, id, chunk;
  };
  struct Client {
    std::shared_ptr<Stream> stream;
    enum class Phase { kClusters, kWorkers, kLive } phase = Phase::kClusters;
    std::string cursor;  // the last id sent in this phase
    int part = 0;
    bool fetching = false;   // a piece is being read
    std::vector<Held> held;  // changes published meanwhile
    size_t held_bytes = 0;
  };
  std::vector<std::shared_ptr<Client>> clients_;
  std::condition_variable cv_;
  bool quit_ = false;
  bool wake_ = false;  // a stream opened: start its snapshot now
  std::chrono::steady_clock::time_point next_heartbeat_;
  std::thread thread_;
};

// "event: <name>\ndata: <json>\n\n"
std::string sse_event(const std::string& name, const nlohmann::json& data);

}  // namespace muster::service
