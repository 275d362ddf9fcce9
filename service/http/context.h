// ServerContext: what every connection of an HttpServer shares: the
// options, the route table and authenticator, the handler lanes, the
// io_context, the set of open connections, and the gate through which
// other threads (handlers replying, producers writing to streams) reach a
// connection.
//
// Lifetime: owned by shared_ptr by the server and by every connection, so
// the io_context outlives each socket even when a late reply keeps a
// connection alive past the server. The router and authenticator must
// outlive the server (they are only used while the gate is open).
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ssl/context.hpp>

#include "service/auth.h"
#include "api/base/task_queue.h"
#include "service/http/options.h"
#include "service/router.h"

namespace muster::service::http {

class Connection;

// Other threads post work to the io_context only while the gate is open;
// stop() closes it first, so nothing is posted to an io_context that no
// thread runs any more.
class Gate {
 public:
  template <class F>
  bool run(F&& f) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!open_) return false;
    f();
    return true;
  }
  void close() {
    std::lock_guard<std::mutex> lock(mu_);
    open_ = false;
  }
  bool open() {
    std::lock_guard<std::mutex> lock(mu_);
    return open_;
  }

 private:
  std::mutex mu_;
  bool open_ = true;
};

struct ServerContext {
  ServerContext(HttpServerOptions o, const Router& r, const Authenticator& a)
      : options(std::move(o)),
        router(r),
        auth(a),
        user_lane(lane_options(options.handler_threads, options.max_queued_requests, "user request handlers")),
        agent_lane(lane_options(options.agent_handler_threads, options.max_queued_requests, "agent request handlers")) {}

  static base::TaskQueueOptions lane_options(int threads, size_t max_queued, const char* name);

  const HttpServerOptions options;
  const Router& router;
  const Authenticator& auth;
  // One io_context per I/O thread, each run by its thread alone: a
  // connection's reads, writes and inline handlers stay on one thread, with
  // no hand-off between threads per event (bench/fleet: with one shared
  // io_context, the wake-ups between its two threads cost about as much as
  // the heartbeats they served). The acceptor is on the first; connections
  // are spread round-robin.
  std::vector<std::unique_ptr<boost::asio::io_context>> ios = make_ios(options.io_threads);
  std::atomic<size_t> next_io{0};
  boost::asio::io_context& io_for_next_connection() { return *ios[next_io++ % ios.size()]; }
  static std::vector<std::unique_ptr<boost::asio::io_context>> make_ios(int threads) {
    std::vector<std::unique_ptr<boost::asio::io_context>> out;
    for (int i = 0; i < std::max(threads, 1); ++i) out.push_back(std::make_unique<boost::asio::io_context>(1));
    return out;
  }
  // Set (HttpServer::listen, from options.tls): every connection is TLS.
  std::unique_ptr<boost::asio::ssl::context> tls;
  base::TaskQueue user_lane;
  base::TaskQueue agent_lane;
  base::TaskQueue& lane_of(const Route& route) { return route.lane == Lane::kAgent ? agent_lane : user_lane; }  // not kInline
  Gate gate;

  // The open connections (strong references: a connection waiting for its
  // handler has no I/O in flight to keep it alive).
  // `open_connections` is their count, read without the mutex (every
  // response asks whether to keep its connection).
  std::mutex connections_mu;
  std::unordered_map<const Connection*, std::shared_ptr<Connection>> connections;
  std::atomic<size_t> open_connections{0};

  size_t connection_count() const { return open_connections.load(std::memory_order_relaxed); }
  void add_connection(std::shared_ptr<Connection> c) {
    std::lock_guard<std::mutex> lock(connections_mu);
    if (connections.emplace(c.get(), std::move(c)).second) ++open_connections;
  }
  void remove_connection(const Connection* c) {
    std::lock_guard<std::mutex> lock(connections_mu);
    if (connections.erase(c) > 0) --open_connections;
  }
};

}  // namespace muster::service::http
