// A rank of an elastic cluster that speaks only musterd's world rendezvous
// (runtime/comm/musterd/rendezvous_client.h), no Communicator: it joins a
// generation, swaps its worker id with every rank through the generation's
// KvStore, writes one JSON line per generation to <out>/<worker>.jsonl, then
// waits (world long-poll) until the generation is over or a newcomer waits,
// and joins again. Arguments:
//   --out DIR             where the lines go (required)
//   --until-size N        exit 0 once a generation of N ranks formed after
//                         --until-generation (default: 3 ranks, generation 3)
//   --until-generation G
//   --die-rank R --die-generation G   rank R of generation G kills itself (SIGKILL)
//   --die-in-kv           ... before it wrote its key (a death during the rendezvous)
// elastic_rendezvous_integration_test.py runs it under a real musterd.
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/comm/musterd/rendezvous_client.h"
#include "runtime/error.h"

namespace musterd = muster::runtime::comm::musterd;
using namespace std::chrono_literals;

int main(int argc, char** argv) {
  std::string out;
  int until_size = 3, until_generation = 3, die_rank = -1, die_generation = -1;
  bool die_in_kv = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string { return i + 1 < argc ? argv[++i] : ""; };
    if (a == "--out") out = next();
    else if (a == "--until-size") until_size = std::atoi(next().c_str());
    else if (a == "--until-generation") until_generation = std::atoi(next().c_str());
    else if (a == "--die-rank") die_rank = std::atoi(next().c_str());
    else if (a == "--die-generation") die_generation = std::atoi(next().c_str());
    else if (a == "--die-in-kv") die_in_kv = true;
    else {
      std::cerr << "unknown argument " << a << "\n";
      return 2;
    }
  }
  try {
    auto settings = musterd::RendezvousSettings::from_env();
    if (!settings || out.empty()) {
      std::cerr << "needs MUSTER_RENDEZVOUS_URL and --out\n";
      return 2;
    }
    musterd::RendezvousClient client(*settings);
    int last = 0;
    for (;;) {
      auto a = client.join(last);
      last = a.generation;
      musterd::MusterdKvStore store(*settings, a.generation);
      std::vector<std::string> members;
      try {
        if (die_in_kv && a.rank == die_rank && a.generation == die_generation) ::raise(SIGKILL);
        store.set(a.prefix + "/worker/" + std::to_string(a.rank), settings->worker_id);
        std::vector<std::string> keys;
        for (int r = 0; r < a.size; ++r) keys.push_back(a.prefix + "/worker/" + std::to_string(r));
        members = store.get(keys, 30s);
      } catch (const muster::runtime::CommError& e) {
        // The generation broke under us (a rank died during its rendezvous): join again.
        std::cout << "generation " << a.generation << " broke during its exchange: " << e.what() << std::endl;
        continue;
      }
      {
        std::ofstream f(out + "/" + settings->worker_id + ".jsonl", std::ios::app);
        f << nlohmann::json{{"generation", a.generation}, {"rank", a.rank}, {"size", a.size},
                            {"worker", settings->worker_id}, {"members", members}}
                 .dump()
          << std::endl;
      }
      std::cout << "generation " << a.generation << " rank " << a.rank << " of " << a.size << std::endl;
      try {
        store.set(a.prefix + "/written/" + std::to_string(a.rank), "1");
        if (a.rank == die_rank && a.generation == die_generation) {
          // Die only once every rank has written its line: a death while a
          // survivor still waits in its exchange breaks the generation before
          // that survivor could record it, and the tests read the lines.
          std::vector<std::string> written;
          for (int r = 0; r < a.size; ++r) written.push_back(a.prefix + "/written/" + std::to_string(r));
          store.get(written, 30s);
          ::raise(SIGKILL);
        }
      } catch (const muster::runtime::CommError& e) {
        std::cout << "generation " << a.generation << " broke after its exchange: " << e.what() << std::endl;
        continue;
      }
      if (a.generation >= until_generation && a.size >= until_size) return 0;
      for (;;) {
        auto v = client.world(a.generation, 25s);
        if (v.changed) break;
      }
    }
  } catch (const std::exception& e) {
    std::cerr << "probe: " << e.what() << std::endl;
    return 1;
  }
}
