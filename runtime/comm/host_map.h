// Which ranks share a host: the same machine and boot, the same network
// namespace (loopback and ports are per namespace) and the same /dev/shm.
// Ranks that share one may use shared memory between them and loopback;
// the others talk TCP. Each rank computes its key (this_host_key(), or the
// one CommOptions gives) and formation allgathers them.
#pragma once

#include <string>
#include <vector>

namespace muster::runtime::comm {

// "<hostname>|<boot id>|<net namespace>|<dev/shm device:inode>".
std::string this_host_key();

struct HostMap {
  std::vector<int> host_of;               // rank -> host index (hosts numbered by their lowest rank)
  std::vector<int> local_of;              // rank -> its index among its host's ranks
  std::vector<std::vector<int>> members;  // host index -> its ranks, ascending

  int hosts() const { return static_cast<int>(members.size()); }
  bool same_host(int a, int b) const { return host_of[static_cast<std::size_t>(a)] == host_of[static_cast<std::size_t>(b)]; }
  const std::vector<int>& host_members(int rank) const {
    return members[static_cast<std::size_t>(host_of[static_cast<std::size_t>(rank)])];
  }
  bool one_rank_per_host() const { return members.size() == host_of.size(); }
};

// From every rank's key, in rank order.
HostMap build_host_map(const std::vector<std::string>& keys);

}  // namespace muster::runtime::comm
