#include "runtime/python/parsers.h"

#include "runtime/error.h"

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
