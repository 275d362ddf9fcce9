// A tiny blocking HTTP/1.1 client for the agent: one request per
// connection (Connection: close), http:// URLs only. The agent makes a
// handful of calls a second at most, so this keeps it a small, thread-less
// program that starts fast (64 agents start at once on one machine).
#pragma once

#include <chrono>
#include <optional>
#include <string>

namespace muster::workers::agent {

struct Endpoint {
  std::string host;  // IPv4 address or a name
  int port = 80;
};

// Parses "http://host:port[/...]"; nullopt if malformed.
std::optional<Endpoint> parse_http_url(const std::string& url);

struct HttpReply {
  int status = 0;
  std::string body;
};

// POSTs `json_body` with the bearer token. nullopt when the daemon could not
// be reached or the reply was cut (the caller retries).
std::optional<HttpReply> post_json(const Endpoint& endpoint, const std::string& path, const std::string& token,
                                   const std::string& json_body, std::chrono::milliseconds timeout);

}  // namespace muster::workers::agent
