// HttpServer: serves the Router over HTTP/1.1 (Boost.Beast on asio).
//
// Threads: `io_threads` threads run every socket (accept, read, write),
// each its own io_context with its share of the connections (context.h),
// and never run handler code but a Lane::kInline route's (router.h: the
// agent heartbeat); the other handlers run on two lanes of threads
// (base::TaskQueue): `agent_handler_threads` for the agent routes, so that
// registrations, heartbeats and exit reports never queue behind user
// requests, and `handler_threads` for everything else. A connection's life
// is written out in connection.h; the limits are in HttpServerOptions
// (options.h). With options.tls the port speaks only TLS (https://): the
// certificate and key are loaded by listen(), which fails naming the file at
// fault.
//
// Contract: listen() binds and listens (SOCK_CLOEXEC: launched programs do
// not inherit the port) without serving: connections wait in the kernel's
// backlog, and port() is final (a daemon can build what needs its port
// first). start() listens if that was not done and serves until stop(). stop() closes the
// listener and every connection and stream, waits for running handlers to
// return and drops queued ones; replies that come later are ignored. The
// Router and Authenticator must outlive the server and stay unchanged while
// it serves. stop() and the destructor are safe at any time.
#pragma once

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>

#include "api/status.h"
#include "service/auth.h"
#include "service/http/options.h"
#include "service/router.h"

namespace muster::service {

namespace http {
struct ServerContext;
}

// A port on `host` that was free a moment ago (bind to port 0, read, close).
api::Result<int> pick_free_port(const std::string& host);

class HttpServer {
 public:
  HttpServer(HttpServerOptions options, const Router& router, const Authenticator& auth);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  api::Status listen();
  api::Status start();
  void stop();
  // The bound port (options.port, or the one picked for port 0).
  int port() const { return port_; }
  std::string url() const;
  // Open connections, for tests and metrics.
  size_t connection_count() const;

 private:
  void accept();
  void on_readable(const boost::system::error_code& ec);

  std::shared_ptr<http::ServerContext> ctx_;
  int port_;
  std::unique_ptr<boost::asio::ip::tcp::acceptor> acceptor_;
  std::unique_ptr<boost::asio::steady_timer> retry_timer_;
  std::vector<std::thread> io_threads_;
  // Keeps every io_context's run() going while it has no connection yet.
  std::vector<boost::asio::executor_work_guard<boost::asio::io_context::executor_type>> io_work_;
  int listen_fd_ = -1;  // bound and listening, not yet served
  bool started_ = false;
};

}  // namespace muster::service
