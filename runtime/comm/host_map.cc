#include "runtime/comm/host_map.h"

#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <map>

namespace muster::runtime::comm {

std::string this_host_key() {
  char host[256] = {0};
  gethostname(host, sizeof host - 1);
  std::string boot;
  std::ifstream("/proc/sys/kernel/random/boot_id") >> boot;
  std::string key = std::string(host) + "|" + boot + "|";
  struct stat st {};
  if (stat("/proc/self/ns/net", &st) == 0) key += std::to_string(st.st_ino);
  key += "|";
  if (stat("/dev/shm", &st) == 0) key += std::to_string(st.st_dev) + ":" + std::to_string(st.st_ino);
  return key;
}

HostMap build_host_map(const std::vector<std::string>& keys) {
  HostMap m;
  std::map<std::string, int> index;
  for (std::size_t r = 0; r < keys.size(); ++r) {
    auto it = index.find(keys[r]);
    if (it == index.end()) {
      it = index.emplace(keys[r], static_cast<int>(m.members.size())).first;
      m.members.emplace_back();
    }
    auto& members = m.members[static_cast<std::size_t>(it->second)];
    m.host_of.push_back(it->second);
    m.local_of.push_back(static_cast<int>(members.size()));
    members.push_back(static_cast<int>(r));
  }
  return m;
}

}  // namespace muster::runtime::comm
