#include "runtime/python/errors.h"

#include <exception>

#include "runtime/error.h"

namespace muster::runtime::python {
namespace {

namespace py = pybind11;

// The Python classes of muster.runtime_errors, looked up once at import and
// kept for the life of the process (the translator runs without a module).
struct ErrorClasses {
  py::object failure, invalid_argument, mismatch, comm, timeout, data;
};

ErrorClasses& classes() {
  static auto* c = new ErrorClasses();  // never freed: outlives interpreter teardown order
  return *c;
}

void raise(const py::object& cls, const std::exception& e) {
  py::object instance = cls(e.what());
  PyErr_SetObject(cls.ptr(), instance.ptr());
}

// CommError and PeerTimeoutError carry `rank`: the peer blamed, or None.
void raise_comm(const py::object& cls, const CommError& e) {
  py::object instance = cls(e.what());
  instance.attr("rank") = e.rank() < 0 ? py::object(py::none()) : py::object(py::int_(e.rank()));
  PyErr_SetObject(cls.ptr(), instance.ptr());
}

}  // namespace

void install_error_translation(py::module_& m) {
  py::module_ errors = py::module_::import("muster.runtime_errors");
  auto& c = classes();
  c.failure = errors.attr("RuntimeFailure");
  c.invalid_argument = errors.attr("InvalidArgument");
  c.mismatch = errors.attr("MismatchError");
  c.comm = errors.attr("CommError");
  c.timeout = errors.attr("PeerTimeoutError");
  c.data = errors.attr("DataError");
  for (const char* name :
       {"RuntimeFailure", "InvalidArgument", "MismatchError", "CommError", "PeerTimeoutError", "DataError"}) {
    m.attr(name) = errors.attr(name);
  }
  py::register_local_exception_translator([](std::exception_ptr p) {
    auto& c = classes();
    try {
      if (p) std::rethrow_exception(p);
    } catch (const TimeoutError& e) {
      raise_comm(c.timeout, e);
    } catch (const CommError& e) {
      raise_comm(c.comm, e);
    } catch (const MismatchError& e) {
      raise(c.mismatch, e);
    } catch (const InvalidArgument& e) {
      raise(c.invalid_argument, e);
    } catch (const DataError& e) {
      raise(c.data, e);
    } catch (const Error& e) {
      raise(c.failure, e);
    }
  });
}

}  // namespace muster::runtime::python
