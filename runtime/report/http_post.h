// A minimal HTTP/1.1 POST over a TCP socket, for the metrics reporter:
// "http://host:port" only (musterd's agent URL), Connection: close, a
// deadline on connect, send and receive. No TLS, no redirects, no proxies.
#pragma once

#include <chrono>
#include <optional>
#include <string>

namespace muster::runtime::report {

struct HttpTarget {
  std::string host;
  int port = 80;
  std::string base_path;  // "" or "/prefix" without the trailing slash
};

// Parses "http://host[:port][/path]"; nullopt for anything else.
std::optional<HttpTarget> parse_http_url(const std::string& url);

struct HttpResult {
  int status = 0;           // 0: no answer (connect failed, timeout)
  std::string error;        // why, when status is 0
};

HttpResult http_post_json(const HttpTarget& target, const std::string& path, const std::string& bearer,
                          const std::string& body, std::chrono::milliseconds timeout);

}  // namespace muster::runtime::report
