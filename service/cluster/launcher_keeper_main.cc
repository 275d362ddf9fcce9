// muster-launcher: see service/cluster/launcher_keeper.h.
#include <iostream>
#include <string>
#include <vector>

#include "service/cluster/launcher_keeper.h"

int main(int argc, char** argv) {
  const std::vector<std::string> args(argv, argv + argc);
  auto options = muster::service::parse_keeper_argv(args);
  if (!options) {
    std::cerr << "muster-launcher: " << options.status().message() << "\n";
    return 2;
  }
  return muster::service::run_keeper(options.value());
}
