#include "workers/container/subnet.h"

#include <arpa/inet.h>

#include "api/base/settings.h"

namespace muster::workers::container {

std::string format_ipv4(uint32_t address) {
  return std::to_string((address >> 24) & 255) + "." + std::to_string((address >> 16) & 255) + "." +
         std::to_string((address >> 8) & 255) + "." + std::to_string(address & 255);
}

api::Result<Subnet> Subnet::parse(const std::string& cidr) {
  auto slash = cidr.find('/');
  if (slash == std::string::npos)
    return api::invalid_argument("subnet '" + cidr + "' must be in CIDR form, e.g. 10.213.0.0/24", "subnet");
  std::string addr = cidr.substr(0, slash);
  std::string bits = cidr.substr(slash + 1);
  in_addr parsed{};
  if (inet_pton(AF_INET, addr.c_str(), &parsed) != 1)
    return api::invalid_argument("subnet '" + cidr + "': '" + addr + "' is not an IPv4 address", "subnet");
  const long long prefix = base::parse_integer(bits).value_or(-1);  // the one integer dialect
  if (prefix < 8 || prefix > 30)
    return api::invalid_argument("subnet '" + cidr + "': prefix length must be 8..30", "subnet");
  Subnet s;
  s.network_ = ntohl(parsed.s_addr);
  s.prefix_ = static_cast<int>(prefix);
  uint32_t host_mask = (prefix == 32) ? 0 : ((1u << (32 - prefix)) - 1);
  if (s.network_ & host_mask)
    return api::invalid_argument("subnet '" + cidr + "': host bits are set; use " +
                                     format_ipv4(s.network_ & ~host_mask) + "/" + bits,
                                 "subnet");
  return s;
}

std::string Subnet::host(uint32_t index) const { return format_ipv4(network_ + index); }

uint32_t Subnet::container_capacity() const {
  uint32_t hosts = (1u << (32 - prefix_)) - 2;  // minus network and broadcast
  return hosts - 1;                             // minus the bridge
}

std::string Subnet::cidr() const { return format_ipv4(network_) + "/" + std::to_string(prefix_); }

}  // namespace muster::workers::container
