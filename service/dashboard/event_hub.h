// EventHub: server-sent events (text/event-stream) for the dashboard:
// GET /api/v1/events.
//
// Each stream starts with "retry: 2000" and one `snapshot` event
// ({"workers": [...], "clusters": [...]}, from `snapshot`), then gets a
// `worker` event (the worker's JSON) on every worker change and a `cluster`
// event on every cluster change, and a ": heartbeat" comment every
// `heartbeat` so proxies and tunnels keep the connection open and a gone
// client is noticed. A new stream is registered before its snapshot is
// taken and holds the events published meanwhile until the snapshot is
// written, so no change falls between the two. The snapshot is taken
// outside the hub's mutex: publishers call in holding their own locks
// (the ClusterManager's), and the snapshot takes those locks.
//
// Bounds: at most `max_streams` streams at once (one more is answered 503);
// each stream's queue is bounded by the HTTP server (a client that does not
// read is dropped, see Stream). publish() never blocks: Stream::write only
// queues. A background thread sends the heartbeats and forgets closed
// streams; the destructor closes every stream.
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
};

class EventHub {
 public:
  using Snapshot = std::function<nlohmann::json()>;
  EventHub(EventHubOptions options, Snapshot snapshot);
  ~EventHub();
  EventHub(const EventHub&) = delete;
  EventHub& operator=(const EventHub&) = delete;

  // The response of GET /api/v1/events (a stream, or 503 when full).
  Response open();
  // Sends `event` with `data` (one line of JSON) to every open stream.
  void publish(const std::string& event, const nlohmann::json& data);
  size_t stream_count() const;

 private:
  void loop();

  EventHubOptions options_;
  Snapshot snapshot_;
  mutable std::mutex mu_;
  struct Client {
    std::shared_ptr<Stream> stream;
    bool ready = false;    // the snapshot was written
    std::string pending;   // events published before it
  };
  std::vector<std::shared_ptr<Client>> clients_;
  std::condition_variable cv_;
  bool quit_ = false;
  std::thread thread_;
};

// "event: <name>\ndata: <json>\n\n"
std::string sse_event(const std::string& name, const nlohmann::json& data);

}  // namespace muster::service
