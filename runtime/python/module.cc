// _muster_runtime: the C++ runtime as a CPython module (see bindings.h).
#include <pybind11/pybind11.h>

#include "runtime/error.h"
#include "runtime/python/bindings.h"
#include "runtime/python/errors.h"

namespace muster::runtime::python {
DataType parse_dtype(const std::string& name) {
  for (DataType t : {DataType::kFloat32, DataType::kFloat64, DataType::kFloat16, DataType::kBFloat16,
                     DataType::kInt32, DataType::kInt64}) {
    if (name == dtype_name(t)) return t;
  }
  throw InvalidArgument("dtype '" + name +
                        "' is not one the runtime reduces: float32, float64, float16, bfloat16, int32, int64");
}

comm::ReduceOp parse_op(const std::string& name) {
  for (comm::ReduceOp op : {comm::ReduceOp::kSum, comm::ReduceOp::kAverage, comm::ReduceOp::kMin,
                            comm::ReduceOp::kMax}) {
    if (name == comm::reduce_op_name(op)) return op;
  }
  throw InvalidArgument("reduce op '" + name + "' is not one of sum, average, min, max");
}

}  // namespace muster::runtime::python

PYBIND11_MODULE(_muster_runtime, m) {
  m.doc() = "muster's C++ training runtime (collectives, DistributedOptimizer); use muster.runtime or muster.torch";
  muster::runtime::python::install_error_translation(m);
  muster::runtime::python::bind_communicator(m);
  muster::runtime::python::bind_optimizer(m);
  muster::runtime::python::bind_rendezvous(m);
}
