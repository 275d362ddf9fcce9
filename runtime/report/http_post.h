// A minimal HTTP/1.1 client over a TCP socket, for the runtime's calls to
// musterd (the metrics reporter, the world rendezvous of runtime/comm/musterd):
// "http://host:port" only (musterd's agent URL), Connection: close, one
// deadline over connect, send and receive. No TLS, no redirects, no proxies.
#pragma once

#include <chrono>
#include <optional>
#include <string>

#include "api/base/client_socket.h"

namespace muster::runtime::report {

struct HttpTarget {
  std::string host;
  int port = 80;
  std::string base_path;  // "" or "/prefix" without the trailing slash
  bool tls = false;        // https://
  base::TlsVerify verify{};  // with tls: the pinned fingerprint and/or CA file
};

// Parses "http(s)://host[:port][/path]"; nullopt for anything else. An
// https:// target takes its verification from this process's environment
// (MUSTER_TLS_FINGERPRINT, MUSTER_CA_FILE: what musterd gives each worker);
// a malformed fingerprint there makes it nullopt, with *error saying so.
std::optional<HttpTarget> parse_http_url(const std::string& url, std::string* error = nullptr);

struct HttpResult {
  int status = 0;           // 0: no answer (connect failed, timeout)
  std::string error;        // why, when status is 0
};

// POST of a JSON body; only the status line is read.
HttpResult http_post_json(const HttpTarget& target, const std::string& path, const std::string& bearer,
                          const std::string& body, std::chrono::milliseconds timeout);

struct HttpResponse {
  int status = 0;      // 0: no answer (connect failed, timeout, not HTTP)
  std::string body;    // the whole body (Content-Length, chunked, or up to the close)
  std::string error;   // why, when status is 0
};

// `method` "GET" (body ignored) or "POST" (JSON body); `path` may carry a
// query. The answer's body is read whole (at most 64 MiB).
HttpResponse http_request(const HttpTarget& target, const std::string& method, const std::string& path,
                          const std::string& bearer, const std::string& body, std::chrono::milliseconds timeout);

}  // namespace muster::runtime::report
