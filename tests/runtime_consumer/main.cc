// allreduce_sum: every rank contributes rank+1 in a small buffer (MPI's own
// allreduce) and a large one (muster's ring), then prints what it got.
// Uses only the installed runtime (find_package(muster COMPONENTS runtime)).
//   mpirun -np N allreduce_sum   ->   "rank R of N: small S large S"
#include <cstdio>
#include <exception>
#include <memory>
#include <vector>

#include <muster/runtime/comm/communicator.h>

int main() {
  using muster::runtime::DataType;
  using namespace muster::runtime::comm;
  try {
    std::unique_ptr<Communicator> comm = Communicator::create();
    const float mine = static_cast<float>(comm->rank() + 1);
    std::vector<float> small(16, mine);
    std::vector<float> large(1 << 18, mine);  // 1 MiB: above the ring threshold
    comm->allreduce(small.data(), small.size(), DataType::kFloat32, {ReduceOp::kSum, Algorithm::kMpi});
    comm->allreduce(large.data(), large.size(), DataType::kFloat32, {ReduceOp::kSum, Algorithm::kRing});
    for (float v : small) {
      if (v != small[0]) {
        std::fprintf(stderr, "rank %d: small buffer not uniform\n", comm->rank());
        return 1;
      }
    }
    for (float v : large) {
      if (v != large[0]) {
        std::fprintf(stderr, "rank %d: large buffer not uniform\n", comm->rank());
        return 1;
      }
    }
    std::printf("rank %d of %d: small %g large %g\n", comm->rank(), comm->size(), small[0], large[0]);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "allreduce_sum: %s\n", e.what());
    return 1;
  }
}
