#include "runtime/report/http_post.h"

#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace muster::runtime::report {

using Steady = std::chrono::steady_clock;

std::optional<HttpTarget> parse_http_url(const std::string& url) {
  const std::string scheme = "http://";
  if (url.compare(0, scheme.size(), scheme) != 0) return std::nullopt;
  std::string rest = url.substr(scheme.size());
  HttpTarget t;
  const size_t slash = rest.find('/');
  if (slash != std::string::npos) {
    t.base_path = rest.substr(slash);
    while (!t.base_path.empty() && t.base_path.back() == '/') t.base_path.pop_back();
    rest = rest.substr(0, slash);
  }
  const size_t colon = rest.rfind(':');
  if (colon != std::string::npos) {
    try {
      size_t used = 0;
      t.port = std::stoi(rest.substr(colon + 1), &used);
      if (used != rest.size() - colon - 1 || t.port < 1 || t.port > 65535) return std::nullopt;
    } catch (const std::exception&) {
      return std::nullopt;
    }
    rest = rest.substr(0, colon);
  }
  if (rest.empty()) return std::nullopt;
  t.host = rest;
  return t;
}

namespace {

int remaining_ms(Steady::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Steady::now()).count();
  return left > 0 ? static_cast<int>(left) : 0;
}

bool wait_for(int fd, short events, Steady::time_point deadline) {
  pollfd p{fd, events, 0};
  for (;;) {
    const int r = ::poll(&p, 1, remaining_ms(deadline));
    if (r > 0) return true;
    if (r == 0) return false;
    if (errno != EINTR) return false;
  }
}

struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

}  // namespace

HttpResult http_post_json(const HttpTarget& target, const std::string& path, const std::string& bearer,
                          const std::string& body, std::chrono::milliseconds timeout) {
  const auto deadline = Steady::now() + timeout;
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (::getaddrinfo(target.host.c_str(), std::to_string(target.port).c_str(), &hints, &found) != 0 || !found) {
    return {0, "cannot resolve " + target.host};
  }
  Fd s;
  s.fd = ::socket(found->ai_family, found->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, found->ai_protocol);
  if (s.fd < 0) {
    ::freeaddrinfo(found);
    return {0, std::string("socket: ") + std::strerror(errno)};
  }
  int rc = ::connect(s.fd, found->ai_addr, found->ai_addrlen);
  ::freeaddrinfo(found);
  if (rc != 0 && errno != EINPROGRESS) return {0, std::string("connect: ") + std::strerror(errno)};
  if (rc != 0) {
    if (!wait_for(s.fd, POLLOUT, deadline)) return {0, "connect timed out"};
    int err = 0;
    socklen_t len = sizeof err;
    ::getsockopt(s.fd, SOL_SOCKET, SO_ERROR, &err, &len);
    if (err != 0) return {0, std::string("connect: ") + std::strerror(err)};
  }
  const std::string request = "POST " + target.base_path + path + " HTTP/1.1\r\nHost: " + target.host + ":" +
                              std::to_string(target.port) + "\r\nAuthorization: Bearer " + bearer +
                              "\r\nContent-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) +
                              "\r\nConnection: close\r\n\r\n" + body;
  size_t sent = 0;
  while (sent < request.size()) {
    const ssize_t n = ::send(s.fd, request.data() + sent, request.size() - sent, MSG_NOSIGNAL);
    if (n > 0) {
      sent += static_cast<size_t>(n);
    } else if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
      if (!wait_for(s.fd, POLLOUT, deadline)) return {0, "send timed out"};
    } else {
      return {0, std::string("send: ") + std::strerror(errno)};
    }
  }
  // The status line is all we need: "HTTP/1.1 202 ...".
  std::string head;
  char buf[512];
  while (head.find("\r\n") == std::string::npos && head.size() < 4096) {
    if (!wait_for(s.fd, POLLIN, deadline)) return {0, "no answer in time"};
    const ssize_t n = ::recv(s.fd, buf, sizeof buf, 0);
    if (n > 0) head.append(buf, static_cast<size_t>(n));
    else if (n == 0) break;
    else if (errno != EAGAIN && errno != EINTR) return {0, std::string("recv: ") + std::strerror(errno)};
  }
  const size_t sp = head.find(' ');
  if (head.compare(0, 5, "HTTP/") != 0 || sp == std::string::npos) return {0, "not an HTTP answer"};
  return {std::atoi(head.c_str() + sp + 1), ""};
}

}  // namespace muster::runtime::report
