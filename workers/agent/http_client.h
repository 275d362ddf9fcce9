// A tiny blocking HTTP/1.1 client for the agent, http:// or https:// (TLS
// verified by api/base/client_socket.h: the pinned fingerprint or a CA
// file, never skipped): one call per connection (post_json), or an
// HttpConnection kept open from call
// to call (the heartbeats: a TCP handshake and teardown every 2 s per agent
// were most of what 1,024 idle workers cost the machine). It keeps the agent
// a small program that starts fast (many agents start at once on one machine).
#pragma once

#include <chrono>
#include <optional>
#include <string>

#include "api/base/client_socket.h"

namespace muster::workers::agent {

struct Endpoint {
  std::string host;  // IPv4 address or a name
  int port = 80;
  bool tls = false;       // https://
  base::TlsVerify verify{};  // with tls: how the certificate is checked
};

// Parses "http://host:port[/...]" or "https://..."; nullopt if malformed.
// The caller sets `verify` (the agent: MUSTER_TLS_FINGERPRINT, MUSTER_CA_FILE).
std::optional<Endpoint> parse_http_url(const std::string& url);

struct HttpReply {
  int status = 0;
  std::string body;
};

// Why a call got no reply.
struct CallError {
  std::string message{};
  bool certificate_refused = false;  // TLS verification failed: retrying will not help
};

// A connection to the daemon that stays open between calls (HTTP/1.1
// keep-alive) for as long as the daemon keeps it. One caller at a time.
class HttpConnection {
 public:
  // keep_alive false: "Connection: close", a fresh connection per call.
  explicit HttpConnection(Endpoint endpoint, bool keep_alive = true);
  ~HttpConnection();
  HttpConnection(const HttpConnection&) = delete;
  HttpConnection& operator=(const HttpConnection&) = delete;

  // POSTs `json_body` with the bearer token, over the open connection or a
  // new one. A kept connection the daemon closed while it was idle (its
  // idle timeout, a restart) is replaced and the call made again on the new
  // one, once. nullopt when the daemon could not be reached, the reply was
  // cut or the timeout passed (the caller retries); the connection is
  // dropped then.
  std::optional<HttpReply> post(const std::string& path, const std::string& token, const std::string& json_body,
                                std::chrono::milliseconds timeout, CallError* error = nullptr);

 private:
  enum class Outcome { kReply, kStale, kFailed };
  bool connect(std::chrono::steady_clock::time_point deadline, CallError* error);
  Outcome exchange(const std::string& request, std::chrono::steady_clock::time_point deadline, HttpReply* reply);
  void drop();

  Endpoint endpoint_;
  bool keep_alive_;
  base::ClientSocket socket_;
};

// One call on a connection of its own (Connection: close).
std::optional<HttpReply> post_json(const Endpoint& endpoint, const std::string& path, const std::string& token,
                                   const std::string& json_body, std::chrono::milliseconds timeout,
                                   CallError* error = nullptr);

}  // namespace muster::workers::agent
