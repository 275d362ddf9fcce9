#include "workers/agent/network.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

namespace muster::workers::agent {

std::optional<std::string> route_ip_to(const std::string& master_ip, int port) {
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(static_cast<uint16_t>(port));
  if (::inet_pton(AF_INET, master_ip.c_str(), &to.sin_addr) != 1) return std::nullopt;
  int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return std::nullopt;
  std::optional<std::string> out;
  sockaddr_in local{};
  socklen_t len = sizeof local;
  if (::connect(fd, reinterpret_cast<sockaddr*>(&to), sizeof to) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) == 0) {
    char buf[INET_ADDRSTRLEN];
    if (::inet_ntop(AF_INET, &local.sin_addr, buf, sizeof buf)) out = buf;
  }
  ::close(fd);
  return out;
}

std::optional<ReservedPort> ReservedPort::reserve(const std::string& ip) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = 0;
  if (::inet_pton(AF_INET, ip.c_str(), &addr.sin_addr) != 1) return std::nullopt;
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return std::nullopt;
  int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  socklen_t len = sizeof addr;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    ::close(fd);
    return std::nullopt;
  }
  return ReservedPort(fd, ntohs(addr.sin_port));
}

void ReservedPort::release() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

}  // namespace muster::workers::agent
