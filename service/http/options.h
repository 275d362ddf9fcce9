// HttpServerOptions: the listen address and every limit of the HTTP server
// (musterd's --http-* flags; docs/ARCHITECTURE.md, "Limits", says where each
// is enforced).
#pragma once

#include <chrono>
#include <algorithm>
#include <cstddef>
#include <functional>
#include <optional>
#include <string>

namespace muster::service {

// The server's certificate and key (PEM files): set, the server speaks only
// TLS (1.2 or later) on its port.
struct TlsServerFiles {
  std::string cert_file;  // the certificate, then any intermediates
  std::string key_file;
};

struct HttpServerOptions {
  std::string host = "127.0.0.1";
  int port = 7878;  // 0: any free port (HttpServer::port() tells which)
  std::optional<TlsServerFiles> tls;
  // Largest request body, Content-Length or chunked (413 above, checked
  // before the body is read or while it is read, never after buffering).
  size_t max_body_bytes = 1 << 20;
  // Largest request line + headers (431 above).
  size_t max_header_bytes = 16 << 10;
  // Open connections; one more is answered 503 and closed at once. Every
  // running worker's agent keeps one open (its heartbeats), so this bounds
  // the workers a daemon can run beside its users' clients.
  size_t max_connections = 16384;
  // Connections kept open between requests: a response while more are open
  // closes its connection (Connection: close), so that beyond this many
  // clients (30,000 agents against a file limit of 20,000) the rest reconnect
  // per request instead of being refused. 0: max_connections less 1/16 of
  // it (HttpServerOptions::kept_connections()).
  size_t max_kept_connections = 0;
  size_t kept_connections() const {
    return max_kept_connections ? std::min(max_kept_connections, max_connections)
                                : max_connections - max_connections / 16;
  }
  // From a request's first byte to its last (headers and body); a client
  // slower than this is disconnected.
  std::chrono::milliseconds read_timeout{10'000};
  // How long a keep-alive connection may wait for its next request; also
  // the limit on writing one response to a client that does not read.
  std::chrono::milliseconds idle_timeout{60'000};
  // Threads running the sockets (asio) and threads running handlers: the
  // user lane (every route but the agents') and the agent lane (register,
  // heartbeat, exit, wait-release), so agents never queue behind users.
  int io_threads = 2;
  int handler_threads = 8;
  int agent_handler_threads = 2;
  // Requests waiting for a handler thread, per lane; beyond it 503.
  size_t max_queued_requests = 4096;
  // A refused body (413) is read and discarded up to this many bytes (within
  // read_timeout) before the connection closes, so that a client still
  // sending it reads the answer instead of a reset.
  size_t max_drain_bytes = 16 << 20;
  // Bytes a streamed response may queue for a client that reads slower
  // than it is written; beyond it the stream is closed and the client
  // dropped.
  size_t max_stream_queue_bytes = 4 << 20;
  // Called once per response (from an I/O thread; it must only record):
  // the method, the matched route's pattern ("" when no route matched), the
  // status code, and the seconds since the request's headers were read.
  std::function<void(const std::string& method, const std::string& route, int status, double seconds)> on_response;
};

}  // namespace muster::service
