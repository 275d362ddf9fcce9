// ContainerOptions from musterd's --backend-opt key=value flags.
#include <cctype>

#include "workers/container/container_backend.h"

#include "api/base/settings.h"
#include "workers/backend_options.h"

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
      auto port = integer_option(key, value, 1, 65535, "a port number");  // 22x is not 22
      if (!port) return port.status();
      o.ssh_port = static_cast<int>(*port);
    } else if (key == "sshd") {
      auto on = bool_option(key, value);
      if (!on) return on.status();
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
