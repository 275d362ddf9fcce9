// Router: the daemon's route table. Each route is (method, path pattern,
// who may call it, handler); patterns use `{id}` for one path segment.
//
// A group of routes lives in its own file with one function that adds them,
// as the cluster routes do:
//   void register_cluster_routes(Router& router, ClusterManager& clusters);
// in service/cluster/routes.cc, called where the daemon is assembled
// (service/daemon.cc) next to register_worker_routes(). Routes are
// matched literal-segments-first, so /api/v1/clusters/await beats
// /api/v1/clusters/{id}. Every route must also be listed in api/openapi.yaml
// (tests/http_server_test.cc checks it).
//
// Handlers reply through `reply`, exactly once, from any thread and at any
// later time: a handler that waits (await, long-poll) stores `reply` and
// returns at once, so the listener's threads are never pinned.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "api/status.h"
#include "service/auth.h"

namespace muster::service {

struct Request {
  std::string method;  // "GET", "POST"
  std::string path;
  std::map<std::string, std::string> params;  // {id} -> value
  std::map<std::string, std::string> query;
  std::map<std::string, std::string> headers;  // names lower-case ("cookie", "x-csrf-token")
  std::string remote_address;                  // the peer's IP, for logs and metrics
  nlohmann::json body;                         // null when the body is empty
  // When its headers were read (how long it waited for a handler thread is
  // now - received: heartbeats count from their arrival).
  std::chrono::steady_clock::time_point received = std::chrono::steady_clock::now();
};

// A response body produced over time (a followed log, server-sent events).
// The server sends the status line and headers (chunked), then `body` if
// any, then hands the handler's StreamStart a Stream. Writes never block:
// the server queues them, and closes the stream when the client is gone or
// has fallen more than its bound behind; producers drop closed streams.
class Stream {
 public:
  virtual ~Stream() = default;
  // Queues `chunk` for the client; false once the stream is closed.
  virtual bool write(std::string chunk) = 0;
  // Ends the response (sends the last chunk). Idempotent.
  virtual void close() = 0;
  // True once close() was called, the client went away, or it fell behind.
  virtual bool closed() const = 0;
  // Bytes written and not yet handed to the socket: a producer that can wait
  // (a log being caught up, the dashboard's snapshot pieces) writes more
  // only while this is small.
  virtual size_t queued_bytes() const { return 0; }
};
using StreamStart = std::function<void(std::shared_ptr<Stream>)>;

struct Response {
  int http_status = 200;
  std::string content_type = "application/json";
  std::string body;
  // Extra headers ("Set-Cookie", "Cache-Control", "Location", ...).
  std::vector<std::pair<std::string, std::string>> headers;
  // Set for a streamed body; see Stream.
  StreamStart stream;
};

// The one place an api::Status becomes an HTTP response:
// {"error":{"code":"invalid_argument","message":"...","field":"n"}}.
Response error_response(const api::Status& status);
int http_status_of(api::ErrorCode code);
Response json_response(int http_status, const nlohmann::json& body);

using Reply = std::function<void(Response)>;
using Handler = std::function<void(const Request&, Reply)>;

// Which handler threads run a route: agent routes have a lane of their own,
// so agents' registrations, heartbeats and exit reports never wait behind
// user requests (HttpServerOptions::agent_handler_threads). kInline runs
// the handler on the connection's I/O thread, with no hop to a pool and
// back: only for a handler that never blocks (it takes a mutex for
// microseconds and replies before it returns), the agent heartbeat, which
// every live worker sends every 2 s (bench/fleet: the two thread hops cost
// more than everything else a heartbeat does).
enum class Lane { kUser, kAgent, kInline };

struct Route {
  std::string method;
  std::string pattern;
  AuthKind auth = AuthKind::kUser;
  Handler handler;
  Lane lane = Lane::kUser;  // kAgent for AuthKind::kAgent routes, kInline by add_inline()
  std::vector<std::string> segments{};  // `pattern` split at '/', once, by add()
};

class Router {
 public:
  void add(std::string method, std::string pattern, AuthKind auth, Handler handler);
  // A route whose handler runs on the I/O thread (Lane::kInline).
  void add_inline(std::string method, std::string pattern, AuthKind auth, Handler handler);

  struct Match {
    const Route* route;
    std::map<std::string, std::string> params;
  };
  // not_found names the method and path when nothing matches.
  api::Result<Match> match(const std::string& method, const std::string& path) const;

  // The table, for tests and the openapi check.
  const std::vector<Route>& routes() const { return routes_; }

 private:
  void add_route(std::string method, std::string pattern, AuthKind auth, Handler handler, Lane lane);

  std::vector<Route> routes_;
};

}  // namespace muster::service
