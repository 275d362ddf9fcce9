// What the tests that build real containers (root only) share: bridge,
// subnet, name prefix and instance id that belong to this test process
// alone (for a backend of their own or a musterd's), and the clean-up that
// removes whatever a failed test left behind (from the backend's ledger).
#pragma once

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "workers/container/container_backend.h"

namespace muster::workers::container::test_env {

// Names that belong to this test process alone, from a short tag ("cit"):
// bridge m<tag><pid>, name prefix m + the tag's first two letters, subnet
// 10.<subnet_octet>.<pid % 200>.0/24, instance id t<pid % 200>.
struct ContainerNames {
  ContainerNames(const std::string& tag, int subnet_octet)
      : bridge("m" + tag + std::to_string(getpid() % 100000)),
        prefix("m" + tag.substr(0, 2)),
        subnet_prefix("10." + std::to_string(subnet_octet) + "." + std::to_string(getpid() % 200) + "."),
        instance_id("t" + std::to_string(getpid() % 200)) {}

  // musterd's arguments for a container backend with these names.
  std::vector<std::string> daemon_args() const {
    return {"--backend", "container", "--backend-opt", "bridge=" + bridge, "--backend-opt",
            "subnet=" + subnet_prefix + "0/24", "--backend-opt", "prefix=" + prefix};
  }

  std::string bridge, prefix;
  std::string subnet_prefix;  // "10.x.y."
  std::string instance_id;
};

// Removes everything the ledger under `state` lists (a failed test's
// namespaces, links, bridge).
inline void clean_leftovers_in(const std::filesystem::path& state) {
  Ledger ledger(state / "container" / "ledger");
  auto exec = make_system_executor();
  ContainerBackend::clean_leftovers(*exec, ledger);
}

// A backend of the test's own: a fresh state directory
// (muster-<tag>-<pid>) and ContainerOptions with the names above. Call
// remove_leftovers() in TearDown.
struct TestContainers : ContainerNames {
  TestContainers(const std::string& tag, int subnet_octet) : ContainerNames(tag, subnet_octet) {
    state = std::filesystem::temp_directory_path() / ("muster-" + tag + "-" + std::to_string(getpid()));
    std::filesystem::remove_all(state);
    std::filesystem::create_directories(state);
    options.state_dir = state;
    options.bridge = bridge;
    options.subnet = subnet_prefix + "0/24";
    options.prefix = prefix;
    options.instance_id = instance_id;
  }

  // Whatever the ledger lists, then the state directory.
  void remove_leftovers() const {
    clean_leftovers_in(state);
    std::filesystem::remove_all(state);
  }

  std::filesystem::path state;
  ContainerOptions options;
};

inline std::string slurp(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace muster::workers::container::test_env
