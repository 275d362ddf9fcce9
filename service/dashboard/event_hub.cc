#include "service/dashboard/event_hub.h"

#include <algorithm>

namespace muster::service {

namespace {
// Changes held while one piece is read; more means a stalled source, and the
// stream is closed (the page reconnects and starts over).
constexpr size_t kMaxHeldBytes = 1 << 20;
}  // namespace

std::string sse_event(const std::string& name, const nlohmann::json& data) {
  // dump() escapes newlines inside strings, so the data is one line.
  return "event: " + name + "\ndata: " + data.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) +
         "\n\n";
}

EventHub::EventHub(EventHubOptions options, SnapshotSource source)
    : options_(options),
      source_(std::move(source)),
      next_heartbeat_(std::chrono::steady_clock::now() + options_.heartbeat),
      thread_([this] { loop(); }) {}

EventHub::~EventHub() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    quit_ = true;
  }
  cv_.notify_all();
  thread_.join();
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& c : clients_) c->stream->close();
  clients_.clear();
}

Response EventHub::open() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    clients_.erase(std::remove_if(clients_.begin(), clients_.end(), [](const auto& c) { return c->stream->closed(); }),
                   clients_.end());
    if (clients_.size() >= options_.max_streams) {
      return error_response(api::unavailable("too many event streams are open (" +
                                             std::to_string(options_.max_streams) + "); close a dashboard tab"));
    }
  }
  Response r;
  r.content_type = "text/event-stream";
  r.headers.emplace_back("Cache-Control", "no-store");
  r.headers.emplace_back("X-Accel-Buffering", "no");
  r.stream = [this](std::shared_ptr<Stream> stream) {
    auto client = std::make_shared<Client>();
    client->stream = stream;
    {
      std::lock_guard<std::mutex> lock(mu_);
      // Two clients may both have passed open()'s check.
      if (quit_ || clients_.size() >= options_.max_streams) {
        stream->write(sse_event("error", {{"message", "too many event streams are open"}}));
        return stream->close();
      }
      stream->write("retry: 2000\n\n");
      clients_.push_back(client);
      wake_ = true;
    }
    cv_.notify_all();  // the hub thread sends the snapshot
  };
  return r;
}

// Under mu_. A stream still snapshotting gets a change only for an object it
// has been sent already; one not sent yet arrives with its piece.
void EventHub::route_locked(Client& c, const std::string& event, const std::string& id, const std::string& chunk) {
  using Phase = Client::Phase;
  bool send = true;
  if (c.phase != Phase::kLive) {
    if (event == "worker") {
      send = c.phase == Phase::kWorkers && !c.cursor.empty() && id <= c.cursor;
    } else if (event == "cluster") {
      send = c.phase == Phase::kWorkers || (!c.cursor.empty() && id <= c.cursor);
    }
  }
  if (send && !c.stream->write(chunk)) c.stream->close();
}

void EventHub::publish(const std::string& event, const nlohmann::json& data) {
  const std::string chunk = sse_event(event, data);
  const std::string id = data.is_object() && data.contains("id") && data["id"].is_string() ? data["id"].get<std::string>()
                                                                                           : std::string();
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& c : clients_) {
    if (c->fetching) {
      if (c->held_bytes + chunk.size() > kMaxHeldBytes) {
        c->stream->close();
        continue;
      }
      c->held_bytes += chunk.size();
      c->held.push_back({event, id, chunk});
      continue;
    }
    route_locked(*c, event, id, chunk);
  }
}

// Step by step, per piece: a) under mu_, mark the stream `fetching` (changes
// published from now on are held) and take its phase and cursor; b) without
// mu_, read the piece from the source; c) under mu_, write it, move the
// cursor to its last id (or to the next phase when it was short), then
// route the held changes by the new cursor.
void EventHub::pump(const std::shared_ptr<Client>& client) {
  using Phase = Client::Phase;
  for (;;) {
    Phase phase;
    std::string cursor;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (quit_ || client->phase == Phase::kLive || client->stream->closed()) return;
      if (client->stream->queued_bytes() >= options_.max_queued_bytes) return;  // next pass
      client->fetching = true;
      phase = client->phase;
      cursor = client->cursor;
    }
    const auto& page = phase == Phase::kClusters ? source_.clusters : source_.workers;
    std::vector<nlohmann::json> objects;
    if (page) objects = page(cursor, options_.piece);
    std::lock_guard<std::mutex> lock(mu_);
    Client& c = *client;
    c.fetching = false;
    const bool short_piece = objects.size() < options_.piece;
    const bool complete = phase == Phase::kWorkers && short_piece;
    nlohmann::json clusters = nlohmann::json::array(), workers = nlohmann::json::array();
    if (!objects.empty()) c.cursor = objects.back().value("id", c.cursor);
    (phase == Phase::kClusters ? clusters : workers) = nlohmann::json(std::move(objects));
    const std::string piece = sse_event(
        "snapshot", {{"part", c.part++}, {"complete", complete}, {"clusters", clusters}, {"workers", workers}});
    if (!c.stream->write(piece)) c.stream->close();
    if (short_piece) {
      c.phase = phase == Phase::kClusters ? Phase::kWorkers : Phase::kLive;
      c.cursor.clear();
    }
    auto held = std::move(c.held);
    c.held.clear();
    c.held_bytes = 0;
    for (const auto& h : held) route_locked(c, h.event, h.id, h.chunk);
  }
}

size_t EventHub::stream_count() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<size_t>(
      std::count_if(clients_.begin(), clients_.end(), [](const auto& c) { return !c->stream->closed(); }));
}

void EventHub::loop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!quit_) {
    const bool snapshotting = std::any_of(clients_.begin(), clients_.end(), [](const auto& c) {
      return c->phase != Client::Phase::kLive && !c->stream->closed();
    });
    const auto wake = snapshotting ? std::chrono::steady_clock::now() + options_.pace : next_heartbeat_;
    cv_.wait_until(lock, std::min(wake, next_heartbeat_), [this] { return quit_ || wake_; });
    if (quit_) break;
    wake_ = false;
    const auto now = std::chrono::steady_clock::now();
    const bool beat = now >= next_heartbeat_;
    if (beat) next_heartbeat_ = now + options_.heartbeat;
    clients_.erase(std::remove_if(clients_.begin(), clients_.end(),
                                  [beat](const auto& c) {
                                    if (c->stream->closed()) return true;
                                    return beat && c->phase == Client::Phase::kLive &&
                                           !c->stream->write(": heartbeat\n\n");
                                  }),
                   clients_.end());
    auto snapshot = clients_;
    lock.unlock();
    for (const auto& c : snapshot) pump(c);
    lock.lock();
  }
}

}  // namespace muster::service
