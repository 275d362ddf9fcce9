// Which local IPv4 address the TCP transport listens on.
//
// The choice follows Open MPI's btl_tcp_if_include: a comma-separated list of
// interface names ("eth0,ib0") and/or subnets in CIDR form ("10.1.0.0/16");
// the first interface (in the kernel's order) that is up, has an IPv4
// address and matches any entry wins. The list comes from
// MUSTER_COMM_TCP_IFACE, else from OMPI_MCA_btl_tcp_if_include (what a
// cluster's `mpirun -mca btl_tcp_if_include ...` line passes to its ranks),
// else CommOptions::tcp_interface. Without any: 127.0.0.1 when the whole job
// is on one host, otherwise the first up, non-loopback IPv4 interface.
#pragma once

#include <netinet/in.h>

#include <string>
#include <vector>

namespace muster::runtime::comm::tcp {

struct Interface {
  std::string name;
  in_addr address{};
  in_addr netmask{};
  bool up = false;
  bool loopback = false;
};

// This machine's IPv4 interfaces (getifaddrs), in the kernel's order.
std::vector<Interface> local_interfaces();

// The list to honour: MUSTER_COMM_TCP_IFACE, OMPI_MCA_btl_tcp_if_include,
// then `configured`, the first one set.
std::string interface_spec_from_env(const std::string& configured);

// The address to listen on, per the rules above. Throws InvalidArgument when
// `spec` is malformed or matches no up interface (the message lists them).
in_addr choose_address(const std::string& spec, const std::vector<Interface>& interfaces, bool whole_job_on_one_host);

}  // namespace muster::runtime::comm::tcp
