// Allreduce latency, 8 B .. 256 KB: muster's allreduce as it runs by default
// (Algorithm::kAuto: the small path on one host where the op fits it), the
// ring forced (kRing), and MPI_Allreduce, interleaved rep by rep in one
// mpirun so load hits all three alike.
//
//   mpirun -np N allreduce_latency_bench OUT.json [max_bytes (256 KB)] [min_bytes (8)]
//
// Sizes are 8 B x 4^k and the largest; float32 sum, synchronous calls (the
// Horovod pattern: a scalar or a small bucket, then wait). A rep times a
// batch of ops between barriers, sized to take about a millisecond; the
// rep's time per op is the slowest rank's, and figures are medians over the
// reps. Every path is checked for the right sum once per size. Rank 0 writes
//   {"ranks", "rows": [{"size_bytes", "muster_us", "ring_us", "mpi_us",
//                       "ratio_vs_mpi" (mpi_us / muster_us), "ring_ratio_vs_mpi", "reps"}]}
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/comm/communicator.h"

using muster::runtime::DataType;
using namespace muster::runtime::comm;

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// Microseconds per op of `batch` calls of `op`, the slowest rank's.
template <typename F>
double time_batch(int batch, F&& op) {
  MPI_Barrier(MPI_COMM_WORLD);
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < batch; ++i) op();
  double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / batch;
  MPI_Allreduce(MPI_IN_PLACE, &us, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return us;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string out_path = argc > 1 ? argv[1] : "bench/out/allreduce_latency.json";
  const std::size_t max_bytes = argc > 2 ? std::stoull(argv[2]) : (256u << 10);
  const std::size_t min_bytes = argc > 3 ? std::stoull(argv[3]) : 8;
  const int reps = std::getenv("LATENCY_BENCH_REPS") ? std::atoi(std::getenv("LATENCY_BENCH_REPS")) : 15;
  auto comm = Communicator::create();
  const int rank = comm->rank(), size = comm->size();

  std::vector<std::size_t> sizes;
  for (std::size_t b = min_bytes; b < max_bytes; b *= 4) sizes.push_back(b);
  sizes.push_back(max_bytes);

  nlohmann::json rows = nlohmann::json::array();
  if (rank == 0) {
    std::printf("%d ranks, per-op microseconds (median of %d reps)\n%10s %10s %10s %10s %8s\n", size, reps, "bytes",
                "muster", "ring", "MPI", "MPI/mus");
  }
  for (const std::size_t bytes : sizes) {
    const std::size_t count = std::max<std::size_t>(bytes / sizeof(float), 1);
    std::vector<float> a(count), b(count), c(count);
    const int batch = bytes <= (4u << 10) ? 400 : bytes <= (32u << 10) ? 100 : 20;
    auto auto_op = [&] { comm->allreduce(a.data(), count, DataType::kFloat32, {ReduceOp::kSum, Algorithm::kAuto}); };
    auto ring_op = [&] { comm->allreduce(b.data(), count, DataType::kFloat32, {ReduceOp::kSum, Algorithm::kRing}); };
    auto mpi_op = [&] {
      MPI_Allreduce(MPI_IN_PLACE, c.data(), static_cast<int>(count), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    };
    // Correctness once: rank r contributes r + 1.
    std::fill(a.begin(), a.end(), 1.0f + static_cast<float>(rank));
    std::fill(b.begin(), b.end(), 1.0f + static_cast<float>(rank));
    std::fill(c.begin(), c.end(), 1.0f + static_cast<float>(rank));
    auto_op();
    ring_op();
    mpi_op();
    const float want = static_cast<float>(size * (size + 1) / 2);
    int wrong = a[count - 1] != want || b[count / 2] != want || c[0] != want;
    MPI_Allreduce(MPI_IN_PLACE, &wrong, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (wrong) {
      if (rank == 0) std::fprintf(stderr, "allreduce_latency_bench: wrong sum at %zu bytes\n", bytes);
      return 1;
    }
    // Values stay small and exact: the sums of 1s double per op, so restart
    // from zeros (the timed ops reduce zeros).
    std::fill(a.begin(), a.end(), 0.0f);
    std::fill(b.begin(), b.end(), 0.0f);
    std::fill(c.begin(), c.end(), 0.0f);
    std::vector<double> t_auto, t_ring, t_mpi;
    time_batch(batch, auto_op);  // warm-up
    for (int rep = 0; rep < reps; ++rep) {
      t_auto.push_back(time_batch(batch, auto_op));
      t_ring.push_back(time_batch(batch, ring_op));
      t_mpi.push_back(time_batch(batch, mpi_op));
    }
    const double mu = median(t_auto), ring = median(t_ring), mpi = median(t_mpi);
    if (rank == 0) {
      std::printf("%10zu %10.2f %10.2f %10.2f %7.2fx\n", bytes, mu, ring, mpi, mpi / mu);
      std::fflush(stdout);
    }
    rows.push_back({{"size_bytes", bytes},
                    {"muster_us", mu},
                    {"ring_us", ring},
                    {"mpi_us", mpi},
                    {"ratio_vs_mpi", mpi / mu},
                    {"ring_ratio_vs_mpi", mpi / ring},
                    {"ops_per_rep", batch},
                    {"reps", reps}});
  }
  if (rank == 0) {
    nlohmann::json j = {{"ranks", size}, {"dtype", "float32"}, {"op", "sum"}, {"rows", rows}};
    std::ofstream(out_path) << j.dump(2) << "\n";
  }
  return 0;
}
