#include "service/dashboard/event_hub.h"

#include <algorithm>

namespace muster::service {

namespace {
constexpr size_t kMaxPendingBytes = 1 << 20;
}

std::string sse_event(const std::string& name, const nlohmann::json& data) {
  // dump() escapes newlines inside strings, so the data is one line.
  return "event: " + name + "\ndata: " + data.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) +
         "\n\n";
}

EventHub::EventHub(EventHubOptions options, Snapshot snapshot)
    : options_(options), snapshot_(std::move(snapshot)), thread_([this] { loop(); }) {}

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
      clients_.push_back(client);
    }
    const std::string first = "retry: 2000\n\n" + sse_event("snapshot", snapshot_());
    std::lock_guard<std::mutex> lock(mu_);
    stream->write(first + client->pending);
    client->pending.clear();
    client->ready = true;
  };
  return r;
}

void EventHub::publish(const std::string& event, const nlohmann::json& data) {
  const std::string chunk = sse_event(event, data);
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& c : clients_) {
    if (c->ready) {
      (void)c->stream->write(chunk);
    } else if (c->pending.size() + chunk.size() <= kMaxPendingBytes) {
      c->pending += chunk;
    } else {
      c->stream->close();
    }
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
    cv_.wait_for(lock, options_.heartbeat, [this] { return quit_; });
    if (quit_) break;
    clients_.erase(std::remove_if(clients_.begin(), clients_.end(),
                                  [](const auto& c) { return c->ready && !c->stream->write(": heartbeat\n\n"); }),
                   clients_.end());
  }
}

}  // namespace muster::service
