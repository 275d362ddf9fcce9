// The names the extension's calls take for runtime enums ("float32", "sum"),
// turned into the runtime's types. A unit of its own, below every binding:
// module.cc only assembles the module, and no binding reaches into another
// for a parser.
#pragma once

#include <string>

#include "runtime/comm/communicator.h"
#include "runtime/dtype.h"

namespace muster::runtime::python {

// "float32", "float16", ... -> DataType; throws InvalidArgument naming the choices.
DataType parse_dtype(const std::string& name);
// "sum", "average", "min", "max" -> ReduceOp; throws InvalidArgument naming the choices.
comm::ReduceOp parse_op(const std::string& name);

}  // namespace muster::runtime::python
