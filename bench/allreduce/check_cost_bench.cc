// What comparing OpDescriptors costs an allreduce (runtime/comm/README.md,
// "Checked ops"): two Communicators in one mpirun, one with the check
// (CommOptions::check_ops, the default) and one without, interleaved rep by
// rep at 4 KB, 64 KB and 64 MB (float32, sum).
//
//   mpirun -np N allreduce_check_cost_bench OUT.json
//
// Three ways per size:
//   ring_unchecked  the ring alone (Algorithm::kRing, no descriptor exchange);
//   ring_checked    the descriptor exchange, then the ring (Algorithm::kRing);
//   auto_checked    what an allreduce runs by default (kAuto): at 4 KB the
//                   data travels inside the descriptor exchange (one round),
//                   above it as ring_checked.
// A rep times a batch of ops between barriers (the slowest rank's time);
// figures are medians over reps in microseconds per op. Rank 0 writes
//   {"ranks", "load", "sizes": [{"size_bytes", "ring_unchecked_us", "ring_checked_us",
//                                "auto_checked_us", "check_cost"}]}
// where check_cost = ring_checked / ring_unchecked - 1.
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/comm/communicator.h"

using muster::runtime::DataType;
using namespace muster::runtime::comm;

namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// Microseconds per op of `batch` calls of `op`, the slowest rank's.
double time_batch(Communicator& comm, int batch, const std::function<void()>& op) {
  comm.barrier();
  const double t0 = now_s();
  for (int i = 0; i < batch; ++i) op();
  double dt = (now_s() - t0) / batch * 1e6;
  MPI_Allreduce(MPI_IN_PLACE, &dt, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return dt;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string out_path = argc > 1 ? argv[1] : "bench/out/allreduce_check_cost.json";
  CommOptions checked_options, unchecked_options;
  unchecked_options.check_ops = false;
  auto checked = Communicator::create(checked_options);
  auto unchecked = Communicator::create(unchecked_options);
  const int rank = checked->rank(), size = checked->size();
  nlohmann::json rows = nlohmann::json::array();
  for (std::size_t bytes : {std::size_t{4} << 10, std::size_t{64} << 10, std::size_t{64} << 20}) {
    const std::size_t count = bytes / sizeof(float);
    std::vector<float> buf(count, 1.0f);
    const int batch = bytes <= (64u << 10) ? 200 : 1;
    const int reps = bytes >= (64u << 20) ? 9 : 15;
    std::vector<double> ring_unchecked, ring_checked, auto_checked;
    const AllreduceOptions ring{ReduceOp::kSum, Algorithm::kRing};
    const AllreduceOptions automatic{ReduceOp::kSum, Algorithm::kAuto};
    for (int rep = 0; rep < reps; ++rep) {
      ring_unchecked.push_back(time_batch(*unchecked, batch, [&] {
        unchecked->allreduce(buf.data(), count, DataType::kFloat32, ring);
      }));
      ring_checked.push_back(time_batch(*checked, batch, [&] {
        checked->allreduce(buf.data(), count, DataType::kFloat32, ring);
      }));
      auto_checked.push_back(time_batch(*checked, batch, [&] {
        checked->allreduce(buf.data(), count, DataType::kFloat32, automatic);
      }));
    }
    const double u = median(ring_unchecked), c = median(ring_checked), a = median(auto_checked);
    if (rank == 0) {
      std::printf("%10zu B  ring %9.1f us  ring+check %9.1f us (%+5.1f%%)  auto %9.1f us\n", bytes, u, c,
                  (c / u - 1) * 100, a);
      std::fflush(stdout);
    }
    rows.push_back({{"size_bytes", bytes},
                    {"ring_unchecked_us", u},
                    {"ring_checked_us", c},
                    {"auto_checked_us", a},
                    {"check_cost", c / u - 1},
                    {"reps", reps},
                    {"ops_per_rep", batch}});
  }
  if (rank == 0) {
    nlohmann::json j = {{"ranks", size}, {"transport", checked->transport()}, {"sizes", rows}};
    std::ofstream(out_path) << j.dump(2) << "\n";
  }
  return 0;
}
