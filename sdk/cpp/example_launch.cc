// muster-sdk-example: launch workers, await them, print their IPs, stop them.
//
//   muster-sdk-example [--n N] [--script FILE] [--timeout S]
// Finds musterd like every SDK call (MUSTER_URL/MUSTER_TOKEN or the state
// dir). The script is resolved in musterd's project directory; without one,
// each worker runs a short inline Python sleep.
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string>

#include "sdk/cpp/client.h"

int main(int argc, char** argv) {
  using namespace muster::sdk;
  LaunchOptions opts;
  opts.n = 2;
  opts.cpu = 0.5;
  opts.memory = 0.5;
  double timeout = 60;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--n")) opts.n = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--script")) opts.script = argv[i + 1];
    else if (!std::strcmp(argv[i], "--timeout")) timeout = std::atof(argv[i + 1]);
    else {
      std::cerr << "usage: muster-sdk-example [--n N] [--script FILE] [--timeout S]\n";
      return 2;
    }
  }
  if (opts.script.empty()) opts.code = "import time; time.sleep(30)";
  try {
    Client client = Client::from_environment();
    std::vector<Worker> workers = client.launch_workers(opts);
    std::cout << "launched " << workers.size() << " workers on " << client.url() << "\n";
    AwaitResult up = client.await_workers(ids_of(workers), AwaitOptions{false, timeout});
    for (const Worker& w : up.workers) std::cout << "  " << w.id << " running at " << w.ip_address << "\n";
    for (const Worker& w : up.failures)
      std::cout << "  " << w.id << " FAILED (" << w.status << "): " << w.reason << "\n";
    std::vector<Worker> stopped = client.stop_workers(ids_of(workers));
    std::cout << "stopped " << stopped.size() << " workers\n";
    return up.failures.empty() ? 0 : 1;
  } catch (const MusterError& e) {
    std::cerr << "muster-sdk-example: " << e.what() << "\n";
    return 1;
  }
}
