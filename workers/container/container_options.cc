// ContainerOptions from musterd's --backend-opt key=value flags.
#include <cctype>

#include "workers/container/container_backend.h"

#include "api/base/settings.h"

namespace muster::workers::container {
namespace fs = std::filesystem;
namespace {

bool valid_link_word(const std::string& s) {
  if (s.empty()) return false;
  for (char c : s)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_') return false;
  return true;
}

}  // namespace

api::Result<ContainerOptions> ContainerOptions::from_map(const fs::path& state_dir,
                                                         const std::map<std::string, std::string>& opts) {
  ContainerOptions o;
  o.state_dir = state_dir;
  for (const auto& [key, value] : opts) {
    if (key == "bridge") {
      if (!valid_link_word(value) || value.size() > 15)
        return api::invalid_argument("--backend-opt bridge='" + value + "': use 1-15 letters, digits, - or _",
                                     "bridge");
      o.bridge = value;
    } else if (key == "subnet") {
      o.subnet = value;
    } else if (key == "prefix") {
      if (!valid_link_word(value) || value.size() > 4)
        return api::invalid_argument("--backend-opt prefix='" + value + "': use 1-4 letters or digits", "prefix");
      o.prefix = value;
    } else if (key == "ssh_port") {
      const auto port = base::parse_integer(value);  // the one integer dialect: 22x is not 22
      o.ssh_port = port && *port >= 1 && *port <= 65535 ? static_cast<int>(*port) : 0;
      if (o.ssh_port == 0)
        return api::invalid_argument("--backend-opt ssh_port='" + value + "': not a port number", "ssh_port");
    } else if (key == "sshd") {
      const auto on = base::parse_bool(value);  // the one boolean dialect
      if (!on) return api::invalid_argument("--backend-opt sshd='" + value + "': expected true, false, 1 or 0", "sshd");
      o.start_sshd = *on;
    } else if (key == "instance") {
      if (!valid_link_word(value) || value.size() > 4)
        return api::invalid_argument("--backend-opt instance='" + value + "': use 1-4 letters or digits",
                                     "instance");
      o.instance_id = value;
    } else {
      return api::invalid_argument("unknown container backend option '" + key +
                                       "' (known: bridge, subnet, prefix, ssh_port, sshd, instance)",
                                   key);
    }
  }
  if (auto s = Subnet::parse(o.subnet); !s) return s.status();
  return o;
}

}  // namespace muster::workers::container
