// HttpServer: the cpprest http_listener in front of the Router.
//
// For each request, on a listener thread: reject bodies over the size limit
// (413), parse the JSON body (400 on bad JSON), match the route (404),
// check the bearer token (401/403), then call the handler with a Reply that
// may be called later from any thread. Handlers never block the listener
// on a worker: see router.h.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "muster/api/status.h"
#include "muster/service/auth.h"
#include "muster/service/router.h"

namespace web::http::experimental::listener {
class http_listener;
}

namespace muster::service {

struct HttpServerOptions {
  std::string host = "127.0.0.1";
  int port = 7878;  // must be a concrete port; see pick_free_port()
  size_t max_body_bytes = 1 << 20;
};

// A port on `host` that was free a moment ago (bind to port 0, read, close).
api::Result<int> pick_free_port(const std::string& host);

class HttpServer {
 public:
  HttpServer(HttpServerOptions options, const Router& router, const Authenticator& auth);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  api::Status start();
  void stop();
  std::string url() const;

 private:
  HttpServerOptions options_;
  const Router& router_;
  const Authenticator& auth_;
  std::unique_ptr<web::http::experimental::listener::http_listener> listener_;
};

}  // namespace muster::service
