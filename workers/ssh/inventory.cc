#include "workers/ssh/inventory.h"

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "api/base/settings.h"

namespace muster::workers::ssh {
namespace {

std::string home_dir() {
  const char* h = std::getenv("HOME");
  return h ? h : "/root";
}

std::string expand_home(const std::string& p) {
  if (p.rfind("~/", 0) == 0) return home_dir() + p.substr(1);
  return p;
}

bool parse_int(const std::string& s, int lo, int hi, int& out) {
  const auto v = base::parse_integer(s);  // the one integer dialect (api/base/settings.h)
  if (!v || *v < lo || *v > hi) return false;
  out = static_cast<int>(*v);
  return true;
}

bool valid_address(const std::string& a) {
  if (a.empty() || a[0] == '-') return false;
  for (char c : a)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-' || c == ':' || c == '_')) return false;
  return true;
}

bool valid_user(const std::string& u) {
  if (u.empty() || u[0] == '-') return false;
  for (char c : u)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-' || c == '_')) return false;
  return true;
}

}  // namespace

api::Result<std::vector<Host>> parse_inventory(const std::string& text, const std::string& source) {
  std::vector<Host> hosts;
  std::istringstream in(text);
  std::string line;
  int number = 0;
  const char* user_env = std::getenv("USER");
  while (std::getline(in, line)) {
    ++number;
    auto hash = line.find('#');
    if (hash != std::string::npos) line.resize(hash);
    std::istringstream words(line);
    std::string address;
    if (!(words >> address)) continue;
    auto where = source + ":" + std::to_string(number) + ": ";
    if (!valid_address(address))
      return api::invalid_argument(where + "'" + address + "' is not a host name or IP address", "inventory");
    Host h;
    h.address = address;
    h.user = user_env && *user_env ? user_env : "root";
    h.identity_file = home_dir() + "/.ssh/id_ed25519";
    std::string setting;
    while (words >> setting) {
      auto eq = setting.find('=');
      if (eq == std::string::npos || eq == 0)
        return api::invalid_argument(where + "expected key=value, got '" + setting + "'", "inventory");
      std::string key = setting.substr(0, eq), value = setting.substr(eq + 1);
      if (key == "port") {
        if (!parse_int(value, 1, 65535, h.port))
          return api::invalid_argument(where + "port '" + value + "' is not in 1..65535", "inventory");
      } else if (key == "slots") {
        if (!parse_int(value, 1, 4096, h.slots))
          return api::invalid_argument(where + "slots '" + value + "' is not in 1..4096", "inventory");
      } else if (key == "user") {
        if (!valid_user(value)) return api::invalid_argument(where + "user '" + value + "' is not valid", "inventory");
        h.user = value;
      } else if (key == "identity") {
        if (value.empty()) return api::invalid_argument(where + "identity is empty", "inventory");
        h.identity_file = expand_home(value);
      } else {
        return api::invalid_argument(where + "unknown key '" + key + "' (known: port, user, identity, slots)",
                                     "inventory");
      }
    }
    for (const auto& other : hosts)
      if (other.address == h.address && other.port == h.port)
        return api::invalid_argument(where + "host " + address + ":" + std::to_string(h.port) +
                                         " is listed twice; give it more slots instead",
                                     "inventory");
    hosts.push_back(std::move(h));
  }
  if (hosts.empty()) return api::invalid_argument(source + ": the inventory lists no hosts", "inventory");
  return hosts;
}

api::Result<std::vector<Host>> load_inventory(const std::filesystem::path& file) {
  std::ifstream in(file);
  if (!in)
    return api::invalid_argument("cannot read inventory " + file.string() +
                                     " (pass --backend-opt inventory=FILE; format in workers/ssh/inventory.h)",
                                 "inventory");
  std::stringstream ss;
  ss << in.rdbuf();
  return parse_inventory(ss.str(), file.string());
}

}  // namespace muster::workers::ssh
