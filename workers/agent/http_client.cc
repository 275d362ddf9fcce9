#include "workers/agent/http_client.h"

#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>

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

// Closes the socket on scope exit.
struct Socket {
  int fd = -1;
  ~Socket() {
    if (fd >= 0) ::close(fd);
  }
};

bool wait_fd(int fd, short events, std::chrono::steady_clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
  if (left.count() <= 0) return false;
  pollfd p{fd, events, 0};
  return ::poll(&p, 1, static_cast<int>(left.count())) == 1;
}

}  // namespace

std::optional<HttpReply> post_json(const Endpoint& endpoint, const std::string& path, const std::string& token,
                                   const std::string& json_body, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (::getaddrinfo(endpoint.host.c_str(), std::to_string(endpoint.port).c_str(), &hints, &res) != 0 || !res) {
    return std::nullopt;
  }
  Socket s;
  s.fd = ::socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  const int rc = s.fd < 0 ? -1 : ::connect(s.fd, res->ai_addr, res->ai_addrlen);
  ::freeaddrinfo(res);
  if (s.fd < 0 || (rc != 0 && errno != EINPROGRESS)) return std::nullopt;
  if (rc != 0) {
    if (!wait_fd(s.fd, POLLOUT, deadline)) return std::nullopt;
    int err = 0;
    socklen_t len = sizeof err;
    ::getsockopt(s.fd, SOL_SOCKET, SO_ERROR, &err, &len);
    if (err != 0) return std::nullopt;
  }
  const std::string request = "POST " + path + " HTTP/1.1\r\nHost: " + endpoint.host + ":" +
                              std::to_string(endpoint.port) + "\r\nAuthorization: Bearer " + token +
                              "\r\nContent-Type: application/json\r\nContent-Length: " +
                              std::to_string(json_body.size()) + "\r\nConnection: close\r\n\r\n" + json_body;
  size_t sent = 0;
  while (sent < request.size()) {
    if (!wait_fd(s.fd, POLLOUT, deadline)) return std::nullopt;
    const ssize_t n = ::send(s.fd, request.data() + sent, request.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) {
      if (n < 0 && (errno == EAGAIN || errno == EINTR)) continue;
      return std::nullopt;
    }
    sent += static_cast<size_t>(n);
  }
  // Read until the headers are complete and Content-Length bytes arrived (or EOF).
  std::string in;
  char buf[4096];
  size_t header_end = std::string::npos;
  size_t content_length = std::string::npos;
  for (;;) {
    if (header_end != std::string::npos && content_length != std::string::npos &&
        in.size() >= header_end + 4 + content_length) {
      break;
    }
    if (!wait_fd(s.fd, POLLIN, deadline)) return std::nullopt;
    const ssize_t n = ::recv(s.fd, buf, sizeof buf, 0);
    if (n < 0) {
      if (errno == EAGAIN || errno == EINTR) continue;
      return std::nullopt;
    }
    if (n == 0) break;
    in.append(buf, static_cast<size_t>(n));
    if (header_end == std::string::npos) {
      header_end = in.find("\r\n\r\n");
      if (header_end != std::string::npos) {
        std::string headers = in.substr(0, header_end);
        for (auto& c : headers) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
        const auto cl = headers.find("content-length:");
        if (cl != std::string::npos) content_length = std::strtoul(headers.c_str() + cl + 15, nullptr, 10);
        // No body expected for 204.
        if (headers.compare(0, 12, "http/1.1 204") == 0) content_length = 0;
      }
    }
  }
  if (header_end == std::string::npos || in.compare(0, 5, "HTTP/") != 0) return std::nullopt;
  HttpReply reply;
  const auto sp = in.find(' ');
  if (sp == std::string::npos) return std::nullopt;
  reply.status = std::atoi(in.c_str() + sp + 1);
  reply.body = in.substr(header_end + 4);
  if (content_length != std::string::npos) {
    if (reply.body.size() < content_length) return std::nullopt;
    reply.body.resize(content_length);
  }
  return reply;
}

}  // namespace muster::workers::agent
