// What the tests that build real containers (root only) share: a fresh state
// directory and ContainerOptions whose bridge, subnet, name prefix and
// instance id belong to this test process alone, and the clean-up that
// removes whatever a failed test left behind (from the backend's ledger).
#pragma once

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "muster/workers/container/container_backend.h"

namespace muster::workers::container::test_env {

// A test's own containers set-up. `name` is a short tag ("cit") that names
// the state directory (muster-<name>-<pid>), the bridge (m<name><pid>) and
// the name prefix (m + its first two letters); `subnet_octet` picks
// 10.<subnet_octet>.<pid % 200>.0/24. Call remove_leftovers() in TearDown.
struct TestContainers {
  TestContainers(const std::string& name, int subnet_octet) {
    const int tag = static_cast<int>(getpid() % 200);
    state = std::filesystem::temp_directory_path() / ("muster-" + name + "-" + std::to_string(getpid()));
    std::filesystem::remove_all(state);
    std::filesystem::create_directories(state);
    subnet_prefix = "10." + std::to_string(subnet_octet) + "." + std::to_string(tag) + ".";
    options.state_dir = state;
    options.bridge = "m" + name + std::to_string(getpid() % 100000);
    options.subnet = subnet_prefix + "0/24";
    options.prefix = "m" + name.substr(0, 2);
    options.instance_id = "t" + std::to_string(tag);
  }

  // Everything the ledger lists (a failed test's namespaces, links, bridge),
  // then the state directory.
  void remove_leftovers() const {
    Ledger ledger(state / "container" / "ledger");
    auto exec = make_system_executor();
    ContainerBackend::clean_leftovers(*exec, ledger);
    std::filesystem::remove_all(state);
  }

  std::filesystem::path state;
  std::string subnet_prefix;  // "10.x.y."
  ContainerOptions options;
};

inline std::string slurp(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace muster::workers::container::test_env
