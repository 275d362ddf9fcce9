// follow_logs: launches one worker running `code`, prints its output live with
// follow_worker_logs, then its running_at and duration. Uses only the
// installed SDK (find_package(muster)); finds musterd as the SDK does.
//   follow_logs [LINES]
#include <cstdlib>
#include <iostream>
#include <string>

#include "muster/sdk/cpp/client.h"

int main(int argc, char** argv) {
  const int lines = argc > 1 ? std::atoi(argv[1]) : 3;
  try {
    muster::sdk::Client client = muster::sdk::Client::from_environment();
    muster::sdk::LaunchOptions o;
    o.n = 1;
    o.cpu = 0.5;
    o.memory = 0.5;
    o.code = "import time\nfor i in range(" + std::to_string(lines) +
             "):\n    print('line', i, flush=True)\n    time.sleep(0.2)\n";
    auto launched = client.launch(o);
    for (const auto& w : launched.warnings) std::cerr << "warning: " << w << "\n";
    const std::string id = launched.workers.at(0).id;
    int seen = 0;
    client.follow_worker_logs(id, [&](const std::string& line) {
      std::cout << "[" << id << "] " << line << std::endl;
      if (line.rfind("[muster-agent]", 0) != 0) ++seen;  // the agent's own notes share the log
      return true;
    });
    auto w = client.get_worker(id);
    std::cout << "worker " << id << " " << w.status << " running_at " << w.running_at << " duration "
              << (w.duration ? std::to_string(*w.duration) : "unknown") << std::endl;
    return seen == lines && w.status == "succeeded" ? 0 : 1;
  } catch (const muster::sdk::MusterError& e) {
    std::cerr << "follow_logs: " << e.what() << "\n";
    return 2;
  }
}
