// RawHttpClient: a blocking HTTP/1.1 client on a plain socket, for tests
// that behave like hostile or slow clients (partial headers, bodies that
// never come, pipelining, not reading). Every read has a deadline, so a
// test fails instead of hanging.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <map>
#include <string>

namespace muster::testing {

class RawHttpClient {
 public:
  struct Response {
    int status = 0;  // 0: no (complete) response before the deadline or EOF
    std::map<std::string, std::string> headers;  // names lower-case
    std::string body;
  };

  RawHttpClient() = default;
  explicit RawHttpClient(int port) { connect(port); }
  ~RawHttpClient() { close(); }
  RawHttpClient(RawHttpClient&& o) noexcept : fd_(o.fd_), in_(std::move(o.in_)) { o.fd_ = -1; }
  RawHttpClient(const RawHttpClient&) = delete;

  bool connect(int port) {
    close();
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
      close();
      return false;
    }
    const int one = 1;
    ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    return true;
  }
  void close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
    in_.clear();
  }
  int fd() const { return fd_; }

  // Sends all of `data`; false when the server closed or reset.
  bool send(const std::string& data) {
    size_t off = 0;
    while (off < data.size()) {
      const ssize_t n = ::send(fd_, data.data() + off, data.size() - off, MSG_NOSIGNAL);
      if (n <= 0) return false;
      off += static_cast<size_t>(n);
    }
    return true;
  }
  // Sends what fits without blocking; returns the bytes sent (-1: error).
  ssize_t send_some(const std::string& data) {
    const ssize_t n = ::send(fd_, data.data(), data.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return 0;
    return n;
  }

  // Reads one response (Content-Length, chunked, or until EOF).
  Response read_response(std::chrono::milliseconds timeout = std::chrono::seconds(5)) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    Response r;
    size_t end;
    while ((end = in_.find("\r\n\r\n")) == std::string::npos) {
      if (!fill(deadline)) return r;
    }
    const std::string head = in_.substr(0, end);
    in_.erase(0, end + 4);
    size_t line_end = head.find("\r\n");
    const std::string status_line = head.substr(0, line_end);
    if (status_line.size() < 12) return r;
    const int status = std::atoi(status_line.c_str() + 9);
    while (line_end != std::string::npos) {
      const size_t next = head.find("\r\n", line_end + 2);
      const std::string line = head.substr(line_end + 2, next == std::string::npos ? std::string::npos
                                                                                    : next - line_end - 2);
      const auto colon = line.find(':');
      if (colon != std::string::npos) {
        std::string name = line.substr(0, colon);
        for (auto& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
        r.headers[name] = line.substr(line.find_first_not_of(' ', colon + 1));
      }
      line_end = next;
    }
    if (status == 100) return read_response(timeout);
    if (r.headers.count("content-length")) {
      const size_t len = std::stoul(r.headers["content-length"]);
      while (in_.size() < len) {
        if (!fill(deadline)) return r;
      }
      r.body = in_.substr(0, len);
      in_.erase(0, len);
    } else if (r.headers["transfer-encoding"] == "chunked") {
      for (;;) {
        size_t eol;
        while ((eol = in_.find("\r\n")) == std::string::npos) {
          if (!fill(deadline)) return r;
        }
        const size_t len = std::stoul(in_.substr(0, eol), nullptr, 16);
        while (in_.size() < eol + 2 + len + 2) {
          if (!fill(deadline)) return r;
        }
        r.body += in_.substr(eol + 2, len);
        in_.erase(0, eol + 2 + len + 2);
        if (len == 0) break;
      }
    } else {
      while (fill(deadline)) {
      }
      r.body = in_;
      in_.clear();
    }
    r.status = status;
    return r;
  }

  // Reads the status line and headers only (for streamed responses).
  bool read_until(const std::string& marker, std::chrono::milliseconds timeout = std::chrono::seconds(5)) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (in_.find(marker) == std::string::npos) {
      if (!fill(deadline)) return false;
    }
    return true;
  }

  // True when the server closed (EOF or reset) within `timeout`; bytes that
  // arrive meanwhile are discarded.
  bool closed_within(std::chrono::milliseconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    for (;;) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) return false;
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
      char buf[4096];
      const ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
      if (n <= 0) return true;
    }
  }

 private:
  bool fill(std::chrono::steady_clock::time_point deadline) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return false;
    pollfd p{fd_, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) return false;
    char buf[16384];
    const ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
    if (n <= 0) return false;
    in_.append(buf, static_cast<size_t>(n));
    return true;
  }

  int fd_ = -1;
  std::string in_;
};

// "GET /path HTTP/1.1" with Host and, when given, the bearer token.
inline std::string http_get(const std::string& path, const std::string& token = "") {
  std::string r = "GET " + path + " HTTP/1.1\r\nHost: test\r\n";
  if (!token.empty()) r += "Authorization: Bearer " + token + "\r\n";
  return r + "\r\n";
}

}  // namespace muster::testing
