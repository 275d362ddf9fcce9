#include "api/base/net.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace muster::base {

LocalAddress local_address_towards(const std::string& host, int port) {
  LocalAddress out;
  if (host.empty()) {
    out.failure = "no host given to find the local address towards";
    return out;
  }
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_DGRAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* res = nullptr;
  const std::string service = std::to_string(port);
  if (int rc = ::getaddrinfo(host.c_str(), service.c_str(), &hints, &res); rc != 0 || res == nullptr) {
    out.failure = "cannot resolve '" + host + "' to an IPv4 address: " + (rc ? ::gai_strerror(rc) : "no address");
    return out;
  }
  const int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    out.failure = std::string("socket: ") + std::strerror(errno);
  } else if (::connect(fd, res->ai_addr, res->ai_addrlen) != 0) {  // UDP: only picks the route
    out.failure = "no local address routes to " + host + ": " + std::strerror(errno);
  } else {
    sockaddr_in local{};
    socklen_t len = sizeof local;
    char buf[INET_ADDRSTRLEN] = {0};
    if (::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) != 0 ||
        ::inet_ntop(AF_INET, &local.sin_addr, buf, sizeof buf) == nullptr) {
      out.failure = "getsockname after connecting towards " + host + ": " + std::strerror(errno);
    } else {
      out.address = buf;
    }
  }
  if (fd >= 0) ::close(fd);
  ::freeaddrinfo(res);
  return out;
}

}  // namespace muster::base
