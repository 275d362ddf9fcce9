// Compiled instead of ../allreduce.cc when muster_distributed is not built.
#include "examples/fashion_mnist/mode.h"
#include "runtime/error.h"

namespace muster::examples::fashion_mnist {

std::unique_ptr<Mode> make_allreduce_mode(const TrainOptions&) {
  throw runtime::InvalidArgument(
      "allreduce mode is not built into this fashion_mnist (muster_distributed was not found at configure "
      "time); rebuild with runtime/distributed, or run without mpirun");
}

}  // namespace muster::examples::fashion_mnist
