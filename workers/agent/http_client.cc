#include "workers/agent/http_client.h"

#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

namespace muster::workers::agent {

std::optional<Endpoint> parse_http_url(const std::string& url) {
  const std::string prefix = "http://";
  if (url.compare(0, prefix.size(), prefix) != 0) return std::nullopt;
  std::string rest = url.substr(prefix.size());
  rest = rest.substr(0, rest.find('/'));
  Endpoint e;
  const auto colon = rest.rfind(':');
  if (colon == std::string::npos) {
    e.host = rest;
  } else {
    e.host = rest.substr(0, colon);
    try {
      e.port = std::stoi(rest.substr(colon + 1));
    } catch (const std::exception&) {
      return std::nullopt;
    }
  }
  if (e.host.empty()) return std::nullopt;
  return e;
}

namespace {

bool wait_fd(int fd, short events, std::chrono::steady_clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
  if (left.count() <= 0) return false;
  pollfd p{fd, events, 0};
  return ::poll(&p, 1, static_cast<int>(left.count())) == 1;
}

}  // namespace

HttpConnection::HttpConnection(Endpoint endpoint, bool keep_alive)
    : endpoint_(std::move(endpoint)), keep_alive_(keep_alive) {}

HttpConnection::~HttpConnection() { drop(); }

void HttpConnection::drop() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

bool HttpConnection::connect(std::chrono::steady_clock::time_point deadline) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (::getaddrinfo(endpoint_.host.c_str(), std::to_string(endpoint_.port).c_str(), &hints, &res) != 0 || !res) {
    return false;
  }
  fd_ = ::socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  const int rc = fd_ < 0 ? -1 : ::connect(fd_, res->ai_addr, res->ai_addrlen);
  const bool in_progress = rc != 0 && errno == EINPROGRESS;  // read before freeaddrinfo, which may change errno
  ::freeaddrinfo(res);
  bool connected = fd_ >= 0 && rc == 0;
  if (fd_ >= 0 && in_progress && wait_fd(fd_, POLLOUT, deadline)) {
    int err = 0;
    socklen_t len = sizeof err;
    connected = ::getsockopt(fd_, SOL_SOCKET, SO_ERROR, &err, &len) == 0 && err == 0;
  }
  if (!connected) drop();
  return connected;
}

std::optional<HttpReply> HttpConnection::post(const std::string& path, const std::string& token,
                                              const std::string& json_body, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  const std::string request = "POST " + path + " HTTP/1.1\r\nHost: " + endpoint_.host + ":" +
                              std::to_string(endpoint_.port) + "\r\nAuthorization: Bearer " + token +
                              "\r\nContent-Type: application/json\r\nContent-Length: " +
                              std::to_string(json_body.size()) +
                              (keep_alive_ ? "\r\n\r\n" : "\r\nConnection: close\r\n\r\n") + json_body;
  for (int attempt = 0; attempt < 2; ++attempt) {
    const bool reused = fd_ >= 0;
    if (!reused && !connect(deadline)) return std::nullopt;
    HttpReply reply;
    switch (exchange(request, deadline, &reply)) {
      case Outcome::kReply:
        return reply;
      case Outcome::kStale:
        drop();
        if (reused) continue;  // closed while idle: once more on a new connection
        return std::nullopt;
      case Outcome::kFailed:
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
  size_t sent = 0;
  while (sent < request.size()) {
    if (!wait_fd(fd_, POLLOUT, deadline)) return Outcome::kFailed;
    const ssize_t n = ::send(fd_, request.data() + sent, request.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) {
      if (n < 0 && (errno == EAGAIN || errno == EINTR)) continue;
      return n < 0 && (errno == EPIPE || errno == ECONNRESET) ? Outcome::kStale : Outcome::kFailed;
    }
    sent += static_cast<size_t>(n);
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
    if (!wait_fd(fd_, POLLIN, deadline)) return Outcome::kFailed;
    const ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
    if (n < 0) {
      if (errno == EAGAIN || errno == EINTR) continue;
      return in.empty() && errno == ECONNRESET ? Outcome::kStale : Outcome::kFailed;
    }
    if (n == 0) {
      if (in.empty()) return Outcome::kStale;
      close_after = true;
      break;
    }
    in.append(buf, static_cast<size_t>(n));
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
                                   const std::string& json_body, std::chrono::milliseconds timeout) {
  HttpConnection connection(endpoint, /*keep_alive=*/false);
  return connection.post(path, token, json_body, timeout);
}

}  // namespace muster::workers::agent
