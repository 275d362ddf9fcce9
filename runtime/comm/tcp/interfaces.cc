#include "runtime/comm/tcp/interfaces.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>

#include <cerrno>
#include <cstdlib>
#include <sstream>

#include "api/base/settings.h"
#include "api/base/worker_env.h"
#include "runtime/comm/tcp/socket.h"
#include "runtime/error.h"

namespace muster::runtime::comm::tcp {

std::vector<Interface> local_interfaces() {
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) throw Error("TCP transport: getifaddrs failed: " + errno_text(errno));
  std::vector<Interface> out;
  for (ifaddrs* a = list; a; a = a->ifa_next) {
    if (!a->ifa_addr || a->ifa_addr->sa_family != AF_INET) continue;
    Interface i;
    i.name = a->ifa_name;
    i.address = reinterpret_cast<const sockaddr_in*>(a->ifa_addr)->sin_addr;
    if (a->ifa_netmask) i.netmask = reinterpret_cast<const sockaddr_in*>(a->ifa_netmask)->sin_addr;
    i.up = (a->ifa_flags & IFF_UP) != 0;
    i.loopback = (a->ifa_flags & IFF_LOOPBACK) != 0;
    out.push_back(i);
  }
  freeifaddrs(list);
  return out;
}

std::string interface_spec_from_env(const std::string& configured) {
  const auto env = base::Settings::environment();
  for (const char* name : {base::kEnvCommTcpInterface, "OMPI_MCA_btl_tcp_if_include"}) {
    if (auto v = env.raw(name)) return *v;
  }
  return configured;
}

namespace {

struct Entry {
  std::string name;  // an interface name, or empty for a subnet
  uint32_t net = 0, mask = 0;  // host order
};

Entry parse_entry(const std::string& text, const std::string& spec) {
  Entry e;
  const auto slash = text.find('/');
  if (slash == std::string::npos) {
    e.name = text;
    return e;
  }
  in_addr a{};
  char* end = nullptr;
  const std::string bits_text = text.substr(slash + 1);
  const long bits = std::strtol(bits_text.c_str(), &end, 10);
  if (inet_pton(AF_INET, text.substr(0, slash).c_str(), &a) != 1 || bits_text.empty() || *end != '\0' || bits < 0 ||
      bits > 32) {
    throw InvalidArgument("TCP interface list '" + spec + "': '" + text +
                          "' is neither an interface name nor an IPv4 subnet like 10.1.0.0/16");
  }
  e.mask = bits == 0 ? 0 : ~uint32_t{0} << (32 - bits);
  e.net = ntohl(a.s_addr) & e.mask;
  return e;
}

bool matches(const Entry& e, const Interface& i) {
  if (!e.name.empty()) return e.name == i.name;
  return (ntohl(i.address.s_addr) & e.mask) == e.net;
}

std::string describe(const std::vector<Interface>& interfaces) {
  std::ostringstream os;
  for (const auto& i : interfaces) {
    char text[INET_ADDRSTRLEN] = {};
    inet_ntop(AF_INET, &i.address, text, sizeof text);
    os << (os.tellp() > 0 ? ", " : "") << i.name << " " << text << (i.up ? "" : " (down)");
  }
  return os.tellp() > 0 ? os.str() : "none";
}

}  // namespace

in_addr choose_address(const std::string& spec, const std::vector<Interface>& interfaces, bool whole_job_on_one_host) {
  if (spec.empty()) {
    in_addr loopback{};
    loopback.s_addr = htonl(INADDR_LOOPBACK);
    if (whole_job_on_one_host) return loopback;
    for (const auto& i : interfaces) {
      if (i.up && !i.loopback) return i.address;
    }
    throw InvalidArgument("TCP transport: no up, non-loopback IPv4 interface to reach the other hosts (have: " +
                          describe(interfaces) + "); set " + base::kEnvCommTcpInterface);
  }
  std::vector<Entry> entries;
  std::stringstream ss(spec);
  for (std::string item; std::getline(ss, item, ',');) {
    if (!item.empty()) entries.push_back(parse_entry(item, spec));
  }
  if (entries.empty()) throw InvalidArgument("TCP interface list '" + spec + "' names no interface");
  for (const auto& i : interfaces) {
    if (!i.up) continue;
    for (const auto& e : entries) {
      if (matches(e, i)) return i.address;
    }
  }
  throw InvalidArgument("TCP interface list '" + spec + "' (MUSTER_COMM_TCP_IFACE or btl_tcp_if_include) matches " +
                        "no up IPv4 interface of this host; it has: " + describe(interfaces));
}

}  // namespace muster::runtime::comm::tcp
