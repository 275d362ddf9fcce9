// TestServer: an HttpServer on a free port over a small route table, for
// the limit and stream tests: /healthz (no auth), POST /api/v1/echo (the
// body's size), GET /api/v1/park (answered only when the test releases it)
// and GET /api/v1/stream (a streamed response the test writes to).
#pragma once

#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <vector>

#include "service/http_server.h"

namespace muster::testing {

class TestServer {
 public:
  explicit TestServer(service::HttpServerOptions o = defaults()) : auth_("T0KEN", [](const std::string&) {
    return std::optional<std::string>();
  }) {
    using service::AuthKind;
    router_.add("GET", "/healthz", AuthKind::kNone,
                [](const service::Request&, service::Reply reply) { reply(service::json_response(200, "ok")); });
    router_.add("POST", "/healthz", AuthKind::kNone,
                [](const service::Request&, service::Reply reply) { reply(service::json_response(200, "ok")); });
    router_.add("POST", "/api/v1/echo", AuthKind::kUser, [this](const service::Request& req, service::Reply reply) {
      ++echoed;
      reply(service::json_response(200, {{"bytes", req.body.dump().size()}, {"body", req.body}}));
    });
    router_.add("GET", "/api/v1/park", AuthKind::kUser, [this](const service::Request&, service::Reply reply) {
      std::lock_guard<std::mutex> lock(mu_);
      parked_.push_back(std::move(reply));
      cv_.notify_all();
    });
    router_.add("GET", "/api/v1/stream", AuthKind::kUser, [this](const service::Request&, service::Reply reply) {
      service::Response r;
      r.content_type = "text/plain";
      r.body = "first;";
      r.stream = [this](std::shared_ptr<service::Stream> s) {
        std::lock_guard<std::mutex> lock(mu_);
        streams_.push_back(std::move(s));
        cv_.notify_all();
      };
      reply(std::move(r));
    });
    o.port = 0;
    server_ = std::make_unique<service::HttpServer>(o, router_, auth_);
    EXPECT_TRUE(server_->start().is_ok());
  }

  static service::HttpServerOptions defaults() {
    service::HttpServerOptions o;
    o.max_body_bytes = 64 << 10;
    o.max_header_bytes = 4096;
    o.read_timeout = std::chrono::milliseconds(600);
    o.idle_timeout = std::chrono::seconds(5);
    o.max_stream_queue_bytes = 1 << 20;
    o.max_drain_bytes = 1 << 20;
    return o;
  }

  service::HttpServer& server() { return *server_; }
  int port() const { return server_->port(); }

  // Waits until `n` requests are parked / `n` streams started.
  bool wait_parked(size_t n) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, std::chrono::seconds(10), [&] { return parked_.size() >= n; });
  }
  bool wait_streams(size_t n) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, std::chrono::seconds(10), [&] { return streams_.size() >= n; });
  }
  void release_parked() {
    std::vector<service::Reply> replies;
    {
      std::lock_guard<std::mutex> lock(mu_);
      replies.swap(parked_);
    }
    for (auto& r : replies) r(service::json_response(200, "released"));
  }
  std::vector<service::Reply> take_parked() {
    std::lock_guard<std::mutex> lock(mu_);
    return std::move(parked_);
  }
  std::shared_ptr<service::Stream> stream(size_t i) {
    std::lock_guard<std::mutex> lock(mu_);
    return streams_.at(i);
  }
  void stop() { server_->stop(); }
  void destroy() { server_.reset(); }

  std::atomic<int> echoed{0};

 private:
  service::Router router_;
  service::Authenticator auth_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<service::Reply> parked_;
  std::vector<std::shared_ptr<service::Stream>> streams_;
  std::unique_ptr<service::HttpServer> server_;
};

}  // namespace muster::testing
