// Network helpers of the floor.
//
// local_address_towards(): the local IPv4 address the kernel would use to
// reach `host` (an IPv4 address or a name resolved with getaddrinfo), by
// connecting a UDP socket and reading its own address: no packet is sent.
// That address is what a worker registers with the daemon (the agent) and
// what remote hosts are told to reach the daemon at (the ssh backend). A
// failure names the host and why (no such host, no route: ENETUNREACH, ...).
// Thread-safe.
//
//   auto local = base::local_address_towards("10.0.0.5", 7878);
//   if (local.failure) return fail(*local.failure);   // else local.address: "10.0.0.2"
#pragma once

#include <string>

#include "api/base/error.h"

namespace muster::base {

struct LocalAddress {
  std::string address;  // dotted quad; empty on failure
  Failure failure;
};

// `port` only completes the UDP connect (any number 1-65535 will do).
[[nodiscard]] LocalAddress local_address_towards(const std::string& host, int port = 9);

}  // namespace muster::base
