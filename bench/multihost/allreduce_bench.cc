// Allreduce between hosts: muster's ring over its own TCP transport (the
// default between hosts), the same ring over MPI point-to-point (Open MPI's
// tcp btl, the transport it replaced), and Open MPI's MPI_Allreduce, side by
// side in one mpirun (one rank per host).
//
//   mpirun -np P multihost_allreduce_bench OUT.json BYTES...
//
// For each size the three run rep by rep, interleaved, so load on the
// machine hits them alike; a rep is ops_per_rep(bytes) ops back to back
// between barriers (64 MB of allreduce, 1 to 32 ops, or 512 of at most 4 KB:
// the barrier's ranks leave it milliseconds apart on hosts sharing two
// cores, which one op of a few MB would carry whole), its time the slowest rank's over the ops, and
// the figure the median (algbw = bytes / time per op). Next to it, the CPU
// seconds per op summed over ranks (getrusage: every thread of the process,
// kernel time of its socket calls included): when the hosts share a
// machine's cores, as network namespaces do, that cost is what decides the
// speed. The warm-up's result is checked (timed ops sum the sums again). A/B probes:
// MULTIHOST_AB=NAME=VALUE[,...] makes the second column the default
// transport again, created with those variables set (mpirun -x it);
// MULTIHOST_SKIP_SECOND=1 leaves the second column out (0 in the JSON). A
// size of at most 4 KB (CommOptions::inline_bytes' default) is a latency
// probe: muster runs it as a user's op would (Algorithm::kAuto, the inline
// path), not forced onto the ring; every size also reports microseconds
// per op ("*_us"). MULTIHOST_REPS sets the reps (7). Rank 0
// writes OUT.json:
//   {"ranks", "transport", "sizes": [{"size_bytes", "tcp_gbs", "mpi_links_gbs", "mpi_gbs",
//     "tcp_us", "mpi_links_us", "mpi_us", "tcp_cpu_s", "mpi_links_cpu_s", "mpi_cpu_s", "reps",
//     "ops_per_rep"}]}
#include <mpi.h>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/comm/communicator.h"
#include "runtime/comm/world_communicator.h"

using muster::runtime::DataType;
using namespace muster::runtime::comm;

namespace {

double now_s() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

double cpu_s() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

struct Sample {
  double seconds;  // slowest rank
  double cpu;      // summed over ranks
};

// Ops per timed rep: 64 MB worth, at least 1, at most 32; a latency probe
// (at most 4 KB) 512 back to back, as OSU's osu_allreduce runs thousands of
// small ones: with 32, the milliseconds between the ranks' exits from the
// barrier were a fifth of each 8-byte op's figure on 4 hosts (gloo_allreduce.py
// uses the same rule).
int ops_per_rep(std::size_t bytes) {
  if (bytes <= 4096) return 512;
  return static_cast<int>(std::clamp<std::size_t>((std::size_t{64} << 20) / std::max<std::size_t>(bytes, 1), 1, 32));
}

Sample run_once(const std::function<void()>& op, int ops) {
  MPI_Barrier(MPI_COMM_WORLD);
  const double c0 = cpu_s(), t0 = now_s();
  for (int i = 0; i < ops; ++i) op();
  double v[2] = {(now_s() - t0) / ops, (cpu_s() - c0) / ops};
  double out[2];
  MPI_Allreduce(&v[0], &out[0], 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  MPI_Allreduce(&v[1], &out[1], 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  return {out[0], out[1]};
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s OUT.json BYTES...\n", argv[0]);
    return 2;
  }
  const int reps = std::getenv("MULTIHOST_REPS") ? std::atoi(std::getenv("MULTIHOST_REPS")) : 7;
  CommOptions over_mpi;
  over_mpi.ring_transport = RingTransport::kMpi;
  auto tcp = Communicator::create();  // the default: shm on a host, TCP between hosts
  // MULTIHOST_AB=NAME=VALUE[,NAME=VALUE...] (a probe while developing): the
  // second column is the default transport again, created with those set.
  std::unique_ptr<Communicator> mpi_links;
  if (const char* ab = std::getenv("MULTIHOST_AB"); ab && *ab) {
    std::vector<std::pair<std::string, std::string>> saved;
    std::string rest(ab);
    while (!rest.empty()) {
      const std::string kv = rest.substr(0, rest.find(','));
      rest = rest.find(',') == std::string::npos ? "" : rest.substr(rest.find(',') + 1);
      const std::string name = kv.substr(0, kv.find('='));
      const char* old = std::getenv(name.c_str());
      saved.emplace_back(name, old ? std::string(old) : std::string("\x01"));
      setenv(name.c_str(), kv.substr(kv.find('=') + 1).c_str(), 1);
    }
    mpi_links = Communicator::create();
    for (const auto& [name, value] : saved) {
      if (value == "\x01") unsetenv(name.c_str()); else setenv(name.c_str(), value.c_str(), 1);
    }
  } else {
    mpi_links = Communicator::create(over_mpi);
  }
  const char* skip = std::getenv("MULTIHOST_SKIP_SECOND");
  const bool second = !(skip && std::string(skip) == "1");
  const int rank = tcp->rank(), size = tcp->size();
  const auto& world = dynamic_cast<WorldCommunicator&>(*tcp);
  const std::string transport = world.ring_transport_name() + (world.tcp_io_threads() ? " (I/O threads)" : "");
  nlohmann::json rows = nlohmann::json::array();
  bool ok = true;
  for (int i = 2; i < argc; ++i) {
    const std::size_t bytes = std::stoull(argv[i]), count = bytes / sizeof(float);
    std::vector<float> buf(count);
    std::vector<double> t[3], c[3];
    const float want = static_cast<float>(size * (size + 1) / 2);
    auto fill = [&] { std::fill(buf.begin(), buf.end(), 1.0f + static_cast<float>(rank)); };
    auto check = [&] { ok = ok && buf[0] == want && buf[count / 2] == want && buf[count - 1] == want; };
    const Algorithm algorithm = bytes <= 4096 ? Algorithm::kAuto : Algorithm::kRing;
    const std::function<void()> ops[3] = {
        [&] { tcp->allreduce(buf.data(), count, DataType::kFloat32, {ReduceOp::kSum, algorithm}); },
        [&] { mpi_links->allreduce(buf.data(), count, DataType::kFloat32, {ReduceOp::kSum, algorithm}); },
        [&] { MPI_Allreduce(MPI_IN_PLACE, buf.data(), static_cast<int>(count), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD); }};
    for (int rep = -1; rep < reps; ++rep) {  // rep -1: warm-up, one op, checked
      for (int k = 0; k < 3; ++k) {
        if (k == 1 && !second) {  // left out: an "infinite" time, no CPU
          if (rep >= 0) {
            t[k].push_back(1e30);
            c[k].push_back(0);
          }
          continue;
        }
        fill();
        const Sample s = run_once(ops[k], rep < 0 ? 1 : ops_per_rep(bytes));
        if (rep < 0) check();
        if (rep >= 0) {
          t[k].push_back(s.seconds);
          c[k].push_back(s.cpu);
        }
      }
    }
    auto gbs = [&](int k) { return static_cast<double>(bytes) / median(t[k]) / 1e9; };
    auto us = [&](int k) { return median(t[k]) * 1e6; };
    if (rank == 0) {
      std::printf("%10zu B  tcp %.3f GB/s (%.3f cpu-s)  mpi-links %.3f (%.3f)  MPI_Allreduce %.3f (%.3f)%s\n", bytes,
                  gbs(0), median(c[0]), gbs(1), median(c[1]), gbs(2), median(c[2]), ok ? "" : "  WRONG RESULT");
      std::fflush(stdout);
    }
    rows.push_back({{"size_bytes", bytes},
                    {"tcp_gbs", gbs(0)},
                    {"mpi_links_gbs", gbs(1)},
                    {"mpi_gbs", gbs(2)},
                    {"tcp_us", us(0)},
                    {"mpi_links_us", second ? us(1) : 0.0},
                    {"mpi_us", us(2)},
                    {"tcp_cpu_s", median(c[0])},
                    {"mpi_links_cpu_s", median(c[1])},
                    {"mpi_cpu_s", median(c[2])},
                    {"reps", reps},
                    {"ops_per_rep", ops_per_rep(bytes)}});
  }
  if (!ok) {
    std::fprintf(stderr, "rank %d: wrong allreduce result\n", rank);
    return 1;
  }
  if (rank == 0) {
    nlohmann::json j = {{"ranks", size}, {"transport", transport}, {"sizes", rows}};
    std::ofstream(argv[1]) << j.dump(2) << "\n";
  }
  return 0;
}
