// Communicator and Handle for Python: buffers are (address, count, dtype)
// triples the caller (muster.runtime) takes from numpy arrays or tensors and
// keeps alive until the op's Handle is done.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "runtime/comm/communicator.h"
#include "runtime/error.h"
#include "runtime/python/bindings.h"

namespace muster::runtime::python {
namespace {

using comm::Communicator;
using comm::Handle;

void* address(std::uintptr_t a) { return reinterpret_cast<void*>(a); }

// The process's Communicator behind a Python object; close() ends it early
// (joins the progress thread), later calls raise InvalidArgument. Optimizers
// share ownership (communicator_of), so closing it under a live optimizer
// only ends it when that optimizer goes.
class PyCommunicator {
 public:
  explicit PyCommunicator(int64_t timeout_ms) {
    comm::CommOptions options;
    if (timeout_ms > 0) options.timeout = std::chrono::milliseconds(timeout_ms);
    comm_ = std::shared_ptr<Communicator>(Communicator::create(options));
  }

  Communicator& get() { return *shared(); }
  const std::shared_ptr<Communicator>& shared() {
    if (!comm_) throw InvalidArgument("the communicator was shut down: call init() again");
    return comm_;
  }
  bool open() const { return comm_ != nullptr; }
  void close() { comm_.reset(); }

 private:
  std::shared_ptr<Communicator> comm_;
};

}  // namespace

std::shared_ptr<comm::Communicator> communicator_of(py::handle obj) { return obj.cast<PyCommunicator&>().shared(); }

void bind_communicator(py::module_& m) {
  py::class_<Handle>(m, "Handle", "Completion of one asynchronous collective.")
      .def("wait", &Handle::wait, py::call_guard<py::gil_scoped_release>(),
           "Blocks until the op is done; raises its error (CommError, PeerTimeoutError, ...).")
      .def("done", &Handle::done, "True once wait() would return at once.");

  using Gil = py::call_guard<py::gil_scoped_release>;
  py::class_<PyCommunicator>(m, "Communicator",
                             "The collectives of one process (world from mpirun's environment, else size 1).")
      .def(py::init<int64_t>(), py::arg("timeout_ms") = 0, Gil())
      .def_property_readonly("rank", [](PyCommunicator& c) { return c.get().rank(); })
      .def_property_readonly("size", [](PyCommunicator& c) { return c.get().size(); })
      .def_property_readonly("local_rank", [](PyCommunicator& c) { return c.get().local_rank(); })
      .def_property_readonly("local_size", [](PyCommunicator& c) { return c.get().local_size(); })
      .def_property_readonly("timeout_ms",
                             [](PyCommunicator& c) { return static_cast<int64_t>(c.get().options().timeout.count()); })
      .def_property_readonly("open", &PyCommunicator::open)
      .def(
          "allreduce_async",
          [](PyCommunicator& c, std::uintptr_t data, std::size_t count, const std::string& dtype,
             const std::string& op) {
            comm::AllreduceOptions o;
            o.op = parse_op(op);
            return c.get().allreduce_async(address(data), count, parse_dtype(dtype), o);
          },
          py::arg("data"), py::arg("count"), py::arg("dtype"), py::arg("op"), Gil())
      .def(
          "broadcast_async",
          [](PyCommunicator& c, std::uintptr_t data, std::size_t count, const std::string& dtype, int root) {
            return c.get().broadcast_async(address(data), count, parse_dtype(dtype), root);
          },
          py::arg("data"), py::arg("count"), py::arg("dtype"), py::arg("root"), Gil())
      .def(
          "allgather_async",
          [](PyCommunicator& c, std::uintptr_t send, std::size_t count, const std::string& dtype, std::uintptr_t recv) {
            return c.get().allgather_async(address(send), count, parse_dtype(dtype), address(recv));
          },
          py::arg("send"), py::arg("count"), py::arg("dtype"), py::arg("recv"), Gil())
      .def(
          "allgatherv",
          [](PyCommunicator& c, std::uintptr_t send, std::size_t count, const std::string& dtype) {
            std::vector<char> recv;
            std::vector<std::size_t> counts;
            {
              py::gil_scoped_release release;
              c.get().allgatherv(address(send), count, parse_dtype(dtype), &recv, &counts);
            }
            return std::make_pair(py::bytes(recv.data(), recv.size()), counts);
          },
          py::arg("send"), py::arg("count"), py::arg("dtype"),
          "Every rank's `count` elements, concatenated in rank order: (bytes, counts per rank).")
      .def(
          "barrier_async", [](PyCommunicator& c) { return c.get().barrier_async(); }, Gil())
      .def("close", &PyCommunicator::close, Gil(),
           "Ends the communicator (joins its progress thread); later calls raise.");
}

}  // namespace muster::runtime::python
