// A reserved TCP port on the worker's address (for ps-mode tasks). Which
// local address routes to the daemon is base::local_address_towards().
#pragma once

#include <optional>
#include <string>

namespace muster::workers::agent {

// A TCP port bound on `ip` and held until release() or destruction, so no
// other process takes it before the script binds it (SO_REUSEADDR is set on
// the holding socket; close it right before the script starts).
// The name of the local interface holding IPv4 address `ip` ("eth0", "lo"),
// or nullopt when none does.
std::optional<std::string> interface_with_address(const std::string& ip);

class ReservedPort {
 public:
  static std::optional<ReservedPort> reserve(const std::string& ip);
  ReservedPort(ReservedPort&& other) noexcept : fd_(other.fd_), port_(other.port_) { other.fd_ = -1; }
  ReservedPort& operator=(ReservedPort&&) = delete;
  ReservedPort(const ReservedPort&) = delete;
  ~ReservedPort() { release(); }
  int port() const { return port_; }
  void release();

 private:
  ReservedPort(int fd, int port) : fd_(fd), port_(port) {}
  int fd_;
  int port_;
};

}  // namespace muster::workers::agent
