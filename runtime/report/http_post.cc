#include "runtime/report/http_post.h"

#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cctype>
#include <cstdlib>
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

// Connects and sends `request` before `deadline`; the socket, or why not.
HttpResponse connect_and_send(const HttpTarget& target, const std::string& request, Steady::time_point deadline,
                              Fd& s) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (::getaddrinfo(target.host.c_str(), std::to_string(target.port).c_str(), &hints, &found) != 0 || !found) {
    return {0, "", "cannot resolve " + target.host};
  }
  s.fd = ::socket(found->ai_family, found->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, found->ai_protocol);
  if (s.fd < 0) {
    ::freeaddrinfo(found);
    return {0, "", std::string("socket: ") + std::strerror(errno)};
  }
  int rc = ::connect(s.fd, found->ai_addr, found->ai_addrlen);
  ::freeaddrinfo(found);
  if (rc != 0 && errno != EINPROGRESS) return {0, "", std::string("connect: ") + std::strerror(errno)};
  if (rc != 0) {
    if (!wait_for(s.fd, POLLOUT, deadline)) return {0, "", "connect timed out"};
    int err = 0;
    socklen_t len = sizeof err;
    ::getsockopt(s.fd, SOL_SOCKET, SO_ERROR, &err, &len);
    if (err != 0) return {0, "", std::string("connect: ") + std::strerror(err)};
  }
  size_t sent = 0;
  while (sent < request.size()) {
    const ssize_t n = ::send(s.fd, request.data() + sent, request.size() - sent, MSG_NOSIGNAL);
    if (n > 0) {
      sent += static_cast<size_t>(n);
    } else if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
      if (!wait_for(s.fd, POLLOUT, deadline)) return {0, "", "send timed out"};
    } else {
      return {0, "", std::string("send: ") + std::strerror(errno)};
    }
  }
  return {1, "", ""};
}

std::string request_text(const HttpTarget& target, const std::string& method, const std::string& path,
                         const std::string& bearer, const std::string& body) {
  std::string r = method + " " + target.base_path + path + " HTTP/1.1\r\nHost: " + target.host + ":" +
                  std::to_string(target.port) + "\r\nAuthorization: Bearer " + bearer + "\r\n";
  if (method != "GET") {
    r += "Content-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) + "\r\n";
  }
  r += "Connection: close\r\n\r\n";
  if (method != "GET") r += body;
  return r;
}

// Reads until `done(buffer)` or the peer closes; false on a timeout or an error.
template <typename Done>
bool read_until(int fd, std::string& buffer, Steady::time_point deadline, Done done, std::string& error) {
  char buf[16384];
  while (!done(buffer)) {
    if (!wait_for(fd, POLLIN, deadline)) {
      error = "no answer in time";
      return false;
    }
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n > 0) {
      buffer.append(buf, static_cast<size_t>(n));
      if (buffer.size() > (64u << 20)) {
        error = "answer larger than 64 MiB";
        return false;
      }
    } else if (n == 0) {
      return true;  // closed
    } else if (errno != EAGAIN && errno != EINTR) {
      error = std::string("recv: ") + std::strerror(errno);
      return false;
    }
  }
  return true;
}

std::string lower(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// A chunked body decoded; nullopt while incomplete.
std::optional<std::string> dechunk(const std::string& raw) {
  std::string out;
  size_t pos = 0;
  for (;;) {
    const size_t eol = raw.find("\r\n", pos);
    if (eol == std::string::npos) return std::nullopt;
    const size_t size = std::strtoul(raw.substr(pos, eol - pos).c_str(), nullptr, 16);
    pos = eol + 2;
    if (size == 0) return out;
    if (raw.size() < pos + size + 2) return std::nullopt;
    out.append(raw, pos, size);
    pos += size + 2;
  }
}

}  // namespace

HttpResponse http_request(const HttpTarget& target, const std::string& method, const std::string& path,
                          const std::string& bearer, const std::string& body, std::chrono::milliseconds timeout) {
  const auto deadline = Steady::now() + timeout;
  Fd s;
  HttpResponse r = connect_and_send(target, request_text(target, method, path, bearer, body), deadline, s);
  if (r.status == 0) return r;
  std::string raw;
  std::string error;
  auto have_head = [](const std::string& b) { return b.find("\r\n\r\n") != std::string::npos; };
  if (!read_until(s.fd, raw, deadline, have_head, error)) return {0, "", error};
  const size_t head_end = raw.find("\r\n\r\n");
  if (raw.compare(0, 5, "HTTP/") != 0 || head_end == std::string::npos) return {0, "", "not an HTTP answer"};
  const int status = std::atoi(raw.c_str() + raw.find(' ') + 1);
  const std::string head = lower(raw.substr(0, head_end));
  std::string rest = raw.substr(head_end + 4);
  const size_t cl = head.find("\r\ncontent-length:");
  if (cl != std::string::npos) {
    const size_t want = std::strtoul(head.c_str() + cl + 17, nullptr, 10);
    if (!read_until(s.fd, rest, deadline, [want](const std::string& b) { return b.size() >= want; }, error)) {
      return {0, "", error};
    }
    if (rest.size() < want) return {0, "", "the answer was cut short"};
    rest.resize(want);
    return {status, rest, ""};
  }
  if (head.find("\r\ntransfer-encoding: chunked") != std::string::npos) {
    if (!read_until(s.fd, rest, deadline, [](const std::string& b) { return dechunk(b).has_value(); }, error)) {
      return {0, "", error};
    }
    auto decoded = dechunk(rest);
    if (!decoded) return {0, "", "the answer was cut short"};
    return {status, *decoded, ""};
  }
  if (!read_until(s.fd, rest, deadline, [](const std::string&) { return false; }, error)) return {0, "", error};
  return {status, rest, ""};
}

HttpResult http_post_json(const HttpTarget& target, const std::string& path, const std::string& bearer,
                          const std::string& body, std::chrono::milliseconds timeout) {
  const auto deadline = Steady::now() + timeout;
  Fd s;
  HttpResponse sent = connect_and_send(target, request_text(target, "POST", path, bearer, body), deadline, s);
  if (sent.status == 0) return {0, sent.error};
  // The status line is all we need: "HTTP/1.1 202 ...".
  std::string head;
  std::string error;
  if (!read_until(s.fd, head, deadline, [](const std::string& b) { return b.find("\r\n") != std::string::npos || b.size() >= 4096; },
                  error)) {
    return {0, error};
  }
  const size_t sp = head.find(' ');
  if (head.compare(0, 5, "HTTP/") != 0 || sp == std::string::npos) return {0, "not an HTTP answer"};
  return {std::atoi(head.c_str() + sp + 1), ""};
}

}  // namespace muster::runtime::report
