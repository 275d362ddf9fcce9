// _muster_runtime: the C++ runtime as a CPython module (see bindings.h).
#include <pybind11/pybind11.h>

#include <exception>

#include "runtime/error.h"
#include "runtime/python/bindings.h"

namespace muster::runtime::python {
namespace {

// The Python classes of muster.runtime_errors, looked up once at import and
// kept for the life of the process (the translator runs without a module).
struct ErrorClasses {
  py::object error, invalid_argument, mismatch, comm, timeout, data;
};

ErrorClasses& classes() {
  static auto* c = new ErrorClasses();  // never freed: outlives interpreter teardown order
  return *c;
}

void raise(const py::object& cls, const std::exception& e, int rank = -1, bool with_rank = false) {
  py::object instance = cls(e.what());
  if (with_rank) instance.attr("rank") = rank < 0 ? py::object(py::none()) : py::object(py::int_(rank));
  PyErr_SetObject(cls.ptr(), instance.ptr());
}

}  // namespace

void translate_errors(py::module_& m) {
  py::module_ errors = py::module_::import("muster.runtime_errors");
  auto& c = classes();
  c.error = errors.attr("RuntimeFailure");
  c.invalid_argument = errors.attr("InvalidArgument");
  c.mismatch = errors.attr("MismatchError");
  c.comm = errors.attr("CommError");
  c.timeout = errors.attr("PeerTimeoutError");
  c.data = errors.attr("DataError");
  for (const char* name : {"RuntimeFailure", "InvalidArgument", "MismatchError", "CommError", "PeerTimeoutError",
                           "DataError"}) {
    m.attr(name) = errors.attr(name);
  }
  py::register_exception_translator([](std::exception_ptr p) {
    auto& c = classes();
    try {
      if (p) std::rethrow_exception(p);
    } catch (const TimeoutError& e) {
      raise(c.timeout, e, e.rank(), true);
    } catch (const CommError& e) {
      raise(c.comm, e, e.rank(), true);
    } catch (const MismatchError& e) {
      raise(c.mismatch, e);
    } catch (const InvalidArgument& e) {
      raise(c.invalid_argument, e);
    } catch (const DataError& e) {
      raise(c.data, e);
    } catch (const Error& e) {
      raise(c.error, e);
    }
  });
}

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
  muster::runtime::python::translate_errors(m);
  muster::runtime::python::bind_communicator(m);
  muster::runtime::python::bind_optimizer(m);
}
