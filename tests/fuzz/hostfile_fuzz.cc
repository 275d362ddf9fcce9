// Fuzz target: Open MPI hostfiles (clusterspec/hostfile.h), as musterd and
// the launch-line builders read them.
//
// Contract checked: a bad hostfile ends in SpecError naming the line; an
// accepted non-empty one is valid (hosts_error() is nullopt) and round-trips through
// write_hostfile() and hosts_arg().
#include <cstdint>
#include <cstdlib>
#include <string>

#include "clusterspec/hostfile.h"
#include "clusterspec/spec_error.h"

namespace cs = muster::clusterspec;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  std::vector<cs::HostSlots> hosts;
  try {
    hosts = cs::parse_hostfile(text);
  } catch (const cs::SpecError& e) {
    if (std::string(e.what()).empty()) std::abort();
    return 0;
  }
  if (hosts.empty()) return 0;  // only comments and blank lines: documented as an empty list
  if (cs::hosts_error(hosts)) std::abort();  // parse accepted what the checks reject
  if (cs::parse_hostfile(cs::write_hostfile(hosts)) != hosts) std::abort();
  if (cs::hosts_arg(hosts).empty()) std::abort();
  return 0;
}
