#include "workers/agent/network.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

namespace muster::workers::agent {

std::optional<std::string> interface_with_address(const std::string& ip) {
  in_addr want{};
  if (::inet_pton(AF_INET, ip.c_str(), &want) != 1) return std::nullopt;
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) return std::nullopt;
  std::optional<std::string> found;
  for (ifaddrs* a = list; a != nullptr && !found; a = a->ifa_next) {
    if (a->ifa_addr == nullptr || a->ifa_addr->sa_family != AF_INET) continue;
    if (reinterpret_cast<const sockaddr_in*>(a->ifa_addr)->sin_addr.s_addr == want.s_addr) found = a->ifa_name;
  }
  ::freeifaddrs(list);
  return found;
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
