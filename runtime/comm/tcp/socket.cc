#include "runtime/comm/tcp/socket.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "runtime/error.h"

namespace muster::runtime::comm::tcp {

Socket& Socket::operator=(Socket&& other) noexcept {
  if (this != &other) {
    reset();
    fd_ = other.release();
  }
  return *this;
}

void Socket::reset() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

std::string format_endpoint(in_addr addr, uint16_t port) {
  char text[INET_ADDRSTRLEN] = {};
  inet_ntop(AF_INET, &addr, text, sizeof text);
  return std::string(text) + ":" + std::to_string(port);
}

std::string errno_text(int err) {
  char buf[256];
  // GNU strerror_r returns the message (maybe not in buf).
  return strerror_r(err, buf, sizeof buf);
}

namespace {
void set_int(const Socket& s, int level, int name, int value, const char* what) {
  if (setsockopt(s.fd(), level, name, &value, sizeof value) != 0) {
    throw Error(std::string("TCP transport: setsockopt(") + what + ", " + std::to_string(value) +
                ") failed: " + errno_text(errno));
  }
}
}  // namespace

void set_buffers(const Socket& s, std::size_t buffer_bytes) {
  if (buffer_bytes == 0) return;
  const int bytes = static_cast<int>(std::min<std::size_t>(buffer_bytes, 1u << 30));
  set_int(s, SOL_SOCKET, SO_SNDBUF, bytes, "SO_SNDBUF");
  set_int(s, SOL_SOCKET, SO_RCVBUF, bytes, "SO_RCVBUF");
}

void configure_stream(const Socket& s, std::chrono::milliseconds timeout) {
  const int flags = fcntl(s.fd(), F_GETFL);
  if (flags < 0 || fcntl(s.fd(), F_SETFL, flags | O_NONBLOCK) != 0) {
    throw Error("TCP transport: fcntl(O_NONBLOCK) failed: " + errno_text(errno));
  }
  set_int(s, IPPROTO_TCP, TCP_NODELAY, 1, "TCP_NODELAY");
  const auto ms = std::min<long long>(timeout.count(), 1LL << 30);
  set_int(s, IPPROTO_TCP, TCP_USER_TIMEOUT, static_cast<int>(ms), "TCP_USER_TIMEOUT");
}

uint32_t round_trip_us(const Socket& s) {
  tcp_info info{};
  socklen_t len = sizeof info;
  if (getsockopt(s.fd(), IPPROTO_TCP, TCP_INFO, &info, &len) != 0) return 0;
  return info.tcpi_rtt;
}

}  // namespace muster::runtime::comm::tcp
