#include "workers/agent/http_client.h"

#include <cerrno>
#include <cstring>
#include <utility>

namespace muster::workers::agent {

std::optional<Endpoint> parse_http_url(const std::string& url) {
  const auto parts = base::parse_url(url);
  if (!parts) return std::nullopt;
  Endpoint e;
  e.host = parts->host;
  e.port = parts->port;
  e.tls = parts->tls;
  return e;
}

HttpConnection::HttpConnection(Endpoint endpoint, bool keep_alive)
    : endpoint_(std::move(endpoint)), keep_alive_(keep_alive) {}

HttpConnection::~HttpConnection() { drop(); }

void HttpConnection::drop() { socket_.close(); }

bool HttpConnection::connect(std::chrono::steady_clock::time_point deadline, CallError* error) {
  socket_ = base::ClientSocket::connect(endpoint_.host, endpoint_.port, endpoint_.tls ? &endpoint_.verify : nullptr,
                                        deadline);
  if (!socket_.is_open() && error) *error = CallError{socket_.error(), socket_.certificate_refused()};
  return socket_.is_open();
}

std::optional<HttpReply> HttpConnection::post(const std::string& path, const std::string& token,
                                              const std::string& json_body, std::chrono::milliseconds timeout,
                                              CallError* error) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  const std::string request = "POST " + path + " HTTP/1.1\r\nHost: " + endpoint_.host + ":" +
                              std::to_string(endpoint_.port) + "\r\nAuthorization: Bearer " + token +
                              "\r\nContent-Type: application/json\r\nContent-Length: " +
                              std::to_string(json_body.size()) +
                              (keep_alive_ ? "\r\n\r\n" : "\r\nConnection: close\r\n\r\n") + json_body;
  for (int attempt = 0; attempt < 2; ++attempt) {
    const bool reused = socket_.is_open();
    if (!reused && !connect(deadline, error)) return std::nullopt;
    HttpReply reply;
    switch (exchange(request, deadline, &reply)) {
      case Outcome::kReply:
        return reply;
      case Outcome::kStale:
        drop();
        if (reused) continue;  // closed while idle: once more on a new connection
        if (error) *error = CallError{"the daemon closed the connection before answering"};
        return std::nullopt;
      case Outcome::kFailed:
        if (error) {
          *error = CallError{socket_.error().empty() ? "no complete answer in time" : socket_.error()};
        }
        drop();
        return std::nullopt;
    }
  }
  return std::nullopt;
}

// Sends the request and reads the reply: the headers, then Content-Length
// bytes (or to EOF). kStale: the connection ended before a byte of the
// reply came (a kept connection the daemon had closed).
HttpConnection::Outcome HttpConnection::exchange(const std::string& request,
                                                 std::chrono::steady_clock::time_point deadline, HttpReply* reply) {
  using Io = base::ClientSocket::Io;
  switch (socket_.send_all(request.data(), request.size(), deadline)) {
    case Io::kOk:
      break;
    case Io::kClosed:
      return Outcome::kStale;
    default:
      return Outcome::kFailed;
  }
  std::string in;
  char buf[4096];
  size_t header_end = std::string::npos;
  size_t content_length = std::string::npos;
  bool close_after = !keep_alive_;
  for (;;) {
    if (header_end != std::string::npos && content_length != std::string::npos &&
        in.size() >= header_end + 4 + content_length) {
      break;
    }
    size_t n = 0;
    const Io got = socket_.recv_some(buf, sizeof buf, &n, deadline);
    if (got == Io::kTimeout || got == Io::kError) return Outcome::kFailed;
    if (got == Io::kClosed) {
      if (in.empty()) return Outcome::kStale;
      close_after = true;
      break;
    }
    in.append(buf, n);
    if (header_end == std::string::npos) {
      header_end = in.find("\r\n\r\n");
      if (header_end != std::string::npos) {
        std::string headers = in.substr(0, header_end);
        for (auto& ch : headers) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
        const auto cl = headers.find("content-length:");
        if (cl != std::string::npos) content_length = std::strtoul(headers.c_str() + cl + 15, nullptr, 10);
        // No body expected for 204.
        if (headers.compare(0, 12, "http/1.1 204") == 0) content_length = 0;
        if (headers.find("\r\nconnection: close") != std::string::npos) close_after = true;
      }
    }
  }
  // Without a length the reply ran to EOF: the connection is over either way.
  if (content_length == std::string::npos) close_after = true;
  if (close_after) drop();
  if (header_end == std::string::npos || in.compare(0, 5, "HTTP/") != 0) return Outcome::kFailed;
  const auto sp = in.find(' ');
  if (sp == std::string::npos) return Outcome::kFailed;
  reply->status = std::atoi(in.c_str() + sp + 1);
  reply->body = in.substr(header_end + 4);
  if (content_length != std::string::npos) {
    if (reply->body.size() < content_length) return Outcome::kFailed;
    reply->body.resize(content_length);
  }
  return Outcome::kReply;
}

std::optional<HttpReply> post_json(const Endpoint& endpoint, const std::string& path, const std::string& token,
                                   const std::string& json_body, std::chrono::milliseconds timeout,
                                   CallError* error) {
  HttpConnection connection(endpoint, /*keep_alive=*/false);
  return connection.post(path, token, json_body, timeout, error);
}

}  // namespace muster::workers::agent
