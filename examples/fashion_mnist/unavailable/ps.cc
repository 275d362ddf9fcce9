// Compiled instead of ../ps.cc when muster_ps is not built.
#include "examples/fashion_mnist/mode.h"
#include "runtime/error.h"

namespace muster::examples::fashion_mnist {

std::unique_ptr<Mode> make_ps_mode(const TrainOptions&) {
  throw runtime::InvalidArgument(
      "parameter-server mode is not built into this fashion_mnist (muster_ps was not found at configure "
      "time); rebuild with runtime/ps, or unset TF_CONFIG");
}

}  // namespace muster::examples::fashion_mnist
