// Subnet: an IPv4 network in CIDR form ("10.213.0.0/24") from which the
// container backend hands out addresses: .1 is the bridge, containers get
// .2, .3, ... up to the last address before the broadcast.
#pragma once

#include <cstdint>
#include <string>

#include "api/status.h"

namespace muster::workers::container {

class Subnet {
 public:
  // "A.B.C.D/N" with 8 <= N <= 30; the host bits of A.B.C.D must be zero.
  static api::Result<Subnet> parse(const std::string& cidr);

  int prefix_length() const { return prefix_; }
  std::string bridge_address() const { return host(1); }
  // The address of host number `index` (1 = bridge, 2 = first container).
  std::string host(uint32_t index) const;
  // How many container addresses fit (hosts minus the bridge).
  uint32_t container_capacity() const;
  std::string cidr() const;

 private:
  uint32_t network_ = 0;
  int prefix_ = 24;
};

std::string format_ipv4(uint32_t address);

}  // namespace muster::workers::container
