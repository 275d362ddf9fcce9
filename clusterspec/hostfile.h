// Hosts with slot counts: the -H list and Open MPI's hostfile.
//
//   std::vector<HostSlots> hosts = {{"10.0.0.5", 2}, {"10.0.0.6", 1}};
//   hosts_arg(hosts);        // "10.0.0.5:2,10.0.0.6:1"  (for -H)
//   write_hostfile(hosts);   // "10.0.0.5 slots=2\n10.0.0.6 slots=1\n"
//   parse_hostfile(text);    // back to `hosts`
//
// A hostfile line is `host [slots=N] [max_slots=M]`; `#` starts a comment,
// blank lines are skipped, a host without slots= has 1 slot. Errors name the
// line: "hostfile line 3: slots must be a positive integer, got \"x\"".
// Every host must satisfy is_valid_host(), slots are 1..kMaxSlots, and a host
// appears at most once. Builders and parse throw SpecError.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace muster::clusterspec {

inline constexpr int kMaxSlots = 4096;

struct HostSlots {
  std::string host;
  int slots = 1;
  bool operator==(const HostSlots& o) const { return host == o.host && slots == o.slots; }
};

// nullopt when every host is valid, slots in range and no host repeats;
// else what is wrong. An empty list is an error.
std::optional<std::string> hosts_error(const std::vector<HostSlots>& hosts);

// Total slots.
int total_slots(const std::vector<HostSlots>& hosts);

// "h1:s1,h2:s2" for -H. Throws SpecError (hosts_error).
std::string hosts_arg(const std::vector<HostSlots>& hosts);

// One `host slots=N` line per host. Throws SpecError (hosts_error).
std::string write_hostfile(const std::vector<HostSlots>& hosts);

// Reads a hostfile; throws SpecError naming the line.
std::vector<HostSlots> parse_hostfile(const std::string& text);

}  // namespace muster::clusterspec
