// Communicator and Handle for Python: buffers are (address, count, dtype)
// triples the caller (muster.runtime) takes from numpy arrays or tensors and
// keeps alive until the op's Handle is done. The signatures are listed in
// runtime/comm/README.md ("The API others build on").
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "runtime/comm/communicator.h"
#include "runtime/comm/kv_bootstrap.h"
#include "runtime/error.h"
#include "runtime/python/bindings.h"
#include "runtime/python/parsers.h"

namespace muster::runtime::python {
namespace {

using comm::Communicator;
using comm::Handle;

void* address(std::uintptr_t a) { return reinterpret_cast<void*>(a); }

// A Python object with set(key, value) and get(keys, timeout_ms) as a
// KvStore. Each call takes the GIL; the runtime calls it only from the
// thread that creates or splits a Communicator (never the progress thread).
// Any exception from get() counts as "not all keys there in time"
// (TimeoutError: KvBootstrap then names the missing ranks); from set() as an
// unreachable store (CommError).
class PyKvStore final : public comm::KvStore {
 public:
  explicit PyKvStore(py::object store) : store_(std::move(store)) {}
  ~PyKvStore() override {
    if (!Py_IsInitialized()) {
      store_.release();  // the interpreter is gone: nothing to decrement
      return;
    }
    py::gil_scoped_acquire gil;
    store_ = py::object();
  }

  void set(const std::string& key, const std::string& value) override {
    py::gil_scoped_acquire gil;
    try {
      store_.attr("set")(key, py::bytes(value));
    } catch (py::error_already_set& e) {
      throw CommError("store.set('" + key + "') failed: " + std::string(e.what()));
    }
  }

  std::vector<std::string> get(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override {
    py::gil_scoped_acquire gil;
    py::object got;
    try {
      got = store_.attr("get")(keys, static_cast<int64_t>(timeout.count()));
    } catch (py::error_already_set& e) {
      throw TimeoutError("store.get of " + std::to_string(keys.size()) + " keys failed within " +
                         std::to_string(timeout.count()) + " ms: " + std::string(e.what()));
    }
    std::vector<std::string> out;
    for (py::handle v : got) out.push_back(v.cast<std::string>());
    if (out.size() != keys.size()) {
      throw CommError("store.get returned " + std::to_string(out.size()) + " values for " +
                      std::to_string(keys.size()) + " keys; it must return one bytes value per key, in order");
    }
    return out;
  }

 private:
  py::object store_;
};

// The process's Communicator behind a Python object; close() ends it early
// (an op in flight fails with CommError, the threads are joined), later calls
// raise InvalidArgument. Optimizers share ownership (communicator_of), so
// closing it under a live optimizer only ends it when that optimizer goes.
class PyCommunicator {
 public:
  explicit PyCommunicator(std::shared_ptr<Communicator> comm) : comm_(std::move(comm)) {}

  static std::unique_ptr<PyCommunicator> make(int64_t timeout_ms, py::object store, int rank, int size,
                                               const std::string& prefix) {
    comm::CommOptions options;
    if (timeout_ms > 0) options.timeout = std::chrono::milliseconds(timeout_ms);
    std::unique_ptr<comm::Bootstrap> bootstrap;
    if (store.is_none()) {
      if (rank != -1 || size != -1 || !prefix.empty()) {
        throw InvalidArgument("Communicator: rank, size and prefix go with store=; without a store the world comes "
                              "from the environment");
      }
    } else {
      if (!py::hasattr(store, "set") || !py::hasattr(store, "get")) {
        throw InvalidArgument("Communicator: store must have set(key, value) and get(keys, timeout_ms)");
      }
      if (size < 1 || rank < 0 || rank >= size) {
        throw InvalidArgument("Communicator: with store=, give rank and size (0 <= rank < size); got rank " +
                              std::to_string(rank) + ", size " + std::to_string(size));
      }
      std::shared_ptr<comm::KvStore> kv = native_store_of(store);
      if (!kv) kv = std::make_shared<PyKvStore>(std::move(store));
      bootstrap = std::make_unique<comm::KvBootstrap>(std::move(kv), rank, size, prefix.empty() ? "muster" : prefix,
                                                      "store");
    }
    py::gil_scoped_release release;
    auto c = bootstrap ? Communicator::create(std::move(bootstrap), options) : Communicator::create(options);
    return std::make_unique<PyCommunicator>(std::shared_ptr<Communicator>(std::move(c)));
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

// The result of an op that allocates what it returns (allgatherv, alltoall):
// wait() returns (a numpy uint8 array over the bytes, the per-rank counts).
// The array owns the C++ vector it views, so no copy is made.
class ResultHandle {
 public:
  ResultHandle(Handle handle, std::shared_ptr<std::vector<char>> data, std::shared_ptr<std::vector<std::size_t>> counts)
      : handle_(std::move(handle)), data_(std::move(data)), counts_(std::move(counts)) {}
  bool done() const { return handle_.done(); }
  py::tuple wait() {
    {
      py::gil_scoped_release release;
      handle_.wait();
    }
    auto* keep = new std::shared_ptr<std::vector<char>>(data_);
    py::capsule owner(keep, [](void* p) { delete static_cast<std::shared_ptr<std::vector<char>>*>(p); });
    py::array_t<uint8_t> array({static_cast<py::ssize_t>(data_->size())}, {static_cast<py::ssize_t>(1)},
                               reinterpret_cast<uint8_t*>(data_->data()), owner);
    return py::make_tuple(array, *counts_);
  }

 private:
  Handle handle_;
  std::shared_ptr<std::vector<char>> data_;
  std::shared_ptr<std::vector<std::size_t>> counts_;
};

// A recv's completion: wait() returns the rank the message came from (the
// one named, or the sender a recv from any source matched).
class RecvHandle {
 public:
  RecvHandle(Handle handle, std::shared_ptr<int> source) : handle_(std::move(handle)), source_(std::move(source)) {}
  RecvHandle(RecvHandle&&) = default;
  // Dropped before the message came: the engine still writes the sender's
  // rank into `source_` when it does, so that int outlives this handle.
  ~RecvHandle() {
    if (source_ && !handle_.done()) new std::shared_ptr<int>(source_);
  }
  bool done() const { return handle_.done(); }
  int wait() {
    handle_.wait();
    return *source_;
  }

 private:
  Handle handle_;
  std::shared_ptr<int> source_;
};

comm::P2pOptions p2p_options(int64_t tag, int64_t timeout_ms) {
  comm::P2pOptions o;
  o.tag = tag;
  o.timeout = std::chrono::milliseconds(timeout_ms > 0 ? timeout_ms : 0);
  return o;
}

comm::OpOptions op_options(const std::string& name, const std::vector<int64_t>& shape) {
  comm::OpOptions o;
  o.name = name;
  o.shape = shape;
  return o;
}

}  // namespace

std::shared_ptr<comm::Communicator> communicator_of(py::handle obj) { return obj.cast<PyCommunicator&>().shared(); }

void bind_communicator(py::module_& m) {
  using Gil = py::call_guard<py::gil_scoped_release>;
  py::class_<Handle>(m, "Handle", "Completion of one asynchronous collective.")
      .def("wait", &Handle::wait, Gil(),
           "Blocks until the op is done; raises its error (MismatchError, CommError, PeerTimeoutError, ...).")
      .def("done", &Handle::done, "True once wait() would return at once.");
  py::class_<ResultHandle>(m, "ResultHandle", "Completion of an op that returns data (allgatherv, alltoall).")
      .def("wait", &ResultHandle::wait, "Blocks until the op is done: (numpy uint8 array, per-rank counts).")
      .def("done", &ResultHandle::done, "True once wait() would return at once.");

  py::class_<RecvHandle>(m, "RecvHandle", "Completion of a point-to-point recv.")
      .def("wait", &RecvHandle::wait, Gil(), "Blocks until the message is in place; returns the sender's rank.")
      .def("done", &RecvHandle::done, "True once wait() would return at once.");

  py::class_<PyCommunicator>(
      m, "Communicator",
      "The collectives of one process. Without store: the world from the environment (mpirun, musterd, else one "
      "process). With store (an object with set(key, bytes) and get(keys, timeout_ms) -> list of bytes): the world "
      "of `size` ranks that form over it, this one being `rank`.")
      .def(py::init(&PyCommunicator::make), py::arg("timeout_ms") = 0, py::arg("store") = py::none(),
           py::arg("rank") = -1, py::arg("size") = -1, py::arg("prefix") = "")
      .def_property_readonly("rank", [](PyCommunicator& c) { return c.get().rank(); })
      .def_property_readonly("size", [](PyCommunicator& c) { return c.get().size(); })
      .def_property_readonly("local_rank", [](PyCommunicator& c) { return c.get().local_rank(); })
      .def_property_readonly("local_size", [](PyCommunicator& c) { return c.get().local_size(); })
      .def_property_readonly("timeout_ms",
                             [](PyCommunicator& c) { return static_cast<int64_t>(c.get().options().timeout.count()); })
      .def_property_readonly("bootstrap", [](PyCommunicator& c) { return c.get().bootstrap_kind(); },
                             "What formed the world: 'mpi', 'store', 'single', 'musterd'.")
      .def_property_readonly("transport", [](PyCommunicator& c) { return c.get().transport(); },
                             "What the ring's links run over: 'shm', 'tcp', 'mpi', 'mixed', 'none'.")
      .def_property_readonly("open", &PyCommunicator::open)
      .def_property_readonly(
          "shares_host_memory", [](PyCommunicator& c) { return c.get().shares_host_memory(); },
          "True when allreduces may run direct: the whole world on this host (shared_fd counts only then)")
      .def(
          "forget_shared_file",
          [](PyCommunicator& c, uint64_t device, uint64_t inode) {
            if (c.open()) c.get().forget_shared_file(device, inode);  // closing unmapped them all
          },
          py::arg("device"), py::arg("inode"),
          "Unmaps the shared file (os.stat's st_dev, st_ino) that allreduces with shared_fd mapped; "
          "nothing once closed")
      .def(
          "allreduce_async",
          [](PyCommunicator& c, std::uintptr_t data, std::size_t count, const std::string& dtype,
             const std::string& op, const std::string& name, const std::vector<int64_t>& shape, int shared_fd,
             std::size_t shared_offset) {
            comm::AllreduceOptions o;
            o.op = parse_op(op);
            o.name = name;
            o.shape = shape;
            o.shared_fd = shared_fd;
            o.shared_offset = shared_offset;
            return c.get().allreduce_async(address(data), count, parse_dtype(dtype), o);
          },
          py::arg("data"), py::arg("count"), py::arg("dtype"), py::arg("op") = "sum", py::arg("name") = "",
          py::arg("shape") = std::vector<int64_t>{}, py::arg("shared_fd") = -1, py::arg("shared_offset") = 0, Gil())
      .def(
          "broadcast_async",
          [](PyCommunicator& c, std::uintptr_t data, std::size_t count, const std::string& dtype, int root,
             const std::string& name, const std::vector<int64_t>& shape) {
            return c.get().broadcast_async(address(data), count, parse_dtype(dtype), root, op_options(name, shape));
          },
          py::arg("data"), py::arg("count"), py::arg("dtype"), py::arg("root"), py::arg("name") = "",
          py::arg("shape") = std::vector<int64_t>{}, Gil())
      .def(
          "allgather_async",
          [](PyCommunicator& c, std::uintptr_t send, std::size_t count, const std::string& dtype, std::uintptr_t recv,
             const std::string& name, const std::vector<int64_t>& shape) {
            return c.get().allgather_async(address(send), count, parse_dtype(dtype), address(recv),
                                           op_options(name, shape));
          },
          py::arg("send"), py::arg("count"), py::arg("dtype"), py::arg("recv"), py::arg("name") = "",
          py::arg("shape") = std::vector<int64_t>{}, Gil())
      .def(
          "allgatherv",
          [](PyCommunicator& c, std::uintptr_t send, std::size_t count, const std::string& dtype,
             const std::string& name, const std::vector<int64_t>& shape) {
            std::vector<char> recv;
            std::vector<std::size_t> counts;
            {
              py::gil_scoped_release release;
              c.get().allgatherv(address(send), count, parse_dtype(dtype), &recv, &counts, op_options(name, shape));
            }
            return std::make_pair(py::bytes(recv.data(), recv.size()), counts);
          },
          py::arg("send"), py::arg("count"), py::arg("dtype"), py::arg("name") = "",
          py::arg("shape") = std::vector<int64_t>{},
          "Every rank's `count` elements, concatenated in rank order: (bytes, counts per rank).")
      .def(
          "allgatherv_async",
          [](PyCommunicator& c, std::uintptr_t send, std::size_t count, const std::string& dtype,
             const std::string& name, const std::vector<int64_t>& shape) {
            auto recv = std::make_shared<std::vector<char>>();
            auto counts = std::make_shared<std::vector<std::size_t>>();
            Handle h = c.get().allgatherv_async(address(send), count, parse_dtype(dtype), recv.get(), counts.get(),
                                                op_options(name, shape));
            return ResultHandle(std::move(h), recv, counts);
          },
          py::arg("send"), py::arg("count"), py::arg("dtype"), py::arg("name") = "",
          py::arg("shape") = std::vector<int64_t>{}, Gil())
      .def(
          "reducescatter_async",
          [](PyCommunicator& c, std::uintptr_t send, std::uintptr_t recv, const std::vector<std::size_t>& counts,
             const std::string& dtype, const std::string& op, const std::string& name,
             const std::vector<int64_t>& shape) {
            comm::ReduceScatterOptions o;
            o.op = parse_op(op);
            o.name = name;
            o.shape = shape;
            return c.get().reducescatter_async(address(send), address(recv), counts, parse_dtype(dtype), o);
          },
          py::arg("send"), py::arg("recv"), py::arg("counts"), py::arg("dtype"), py::arg("op") = "sum",
          py::arg("name") = "", py::arg("shape") = std::vector<int64_t>{}, Gil())
      .def(
          "alltoall_async",
          [](PyCommunicator& c, std::uintptr_t send, const std::vector<std::size_t>& send_counts,
             const std::string& dtype, const std::string& name, const std::vector<int64_t>& shape) {
            auto recv = std::make_shared<std::vector<char>>();
            auto counts = std::make_shared<std::vector<std::size_t>>();
            Handle h = c.get().alltoall_async(address(send), send_counts, parse_dtype(dtype), recv.get(), counts.get(),
                                              op_options(name, shape));
            return ResultHandle(std::move(h), recv, counts);
          },
          py::arg("send"), py::arg("send_counts"), py::arg("dtype"), py::arg("name") = "",
          py::arg("shape") = std::vector<int64_t>{}, Gil())
      .def(
          "alltoallv_async",
          [](PyCommunicator& c, std::uintptr_t send, const std::vector<std::size_t>& send_counts, std::uintptr_t recv,
             const std::vector<std::size_t>& recv_counts, const std::string& dtype, const std::string& name,
             const std::vector<int64_t>& shape) {
            return c.get().alltoallv_async(address(send), send_counts, address(recv), recv_counts, parse_dtype(dtype),
                                           op_options(name, shape));
          },
          py::arg("send"), py::arg("send_counts"), py::arg("recv"), py::arg("recv_counts"), py::arg("dtype"),
          py::arg("name") = "", py::arg("shape") = std::vector<int64_t>{}, Gil())
      .def(
          "barrier_async", [](PyCommunicator& c, const std::string& name) { return c.get().barrier_async(op_options(name, {})); },
          py::arg("name") = "", Gil())
      .def(
          "send_async",
          [](PyCommunicator& c, std::uintptr_t data, std::size_t bytes, int dst, int64_t tag, int64_t timeout_ms) {
            return c.get().send_async(address(data), bytes, dst, p2p_options(tag, timeout_ms));
          },
          py::arg("data"), py::arg("bytes"), py::arg("dst"), py::arg("tag") = 0, py::arg("timeout_ms") = 0, Gil(),
          "Point to point: `bytes` at `data` to rank `dst`, outside the collectives' order (communicator.h).")
      .def(
          "recv_async",
          [](PyCommunicator& c, std::uintptr_t data, std::size_t bytes, int src, int64_t tag, int64_t timeout_ms) {
            auto source = std::make_shared<int>(src);
            Handle h = c.get().recv_async(address(data), bytes, src, p2p_options(tag, timeout_ms), source.get());
            return RecvHandle(std::move(h), source);
          },
          py::arg("data"), py::arg("bytes"), py::arg("src") = -1, py::arg("tag") = 0, py::arg("timeout_ms") = 0,
          Gil(), "Point to point: a message of exactly `bytes` from rank `src` (-1: any rank) with `tag`.")
      .def(
          "split",
          [](PyCommunicator& c, const std::vector<int>& ranks, const std::string& name) -> py::object {
            std::unique_ptr<Communicator> sub;
            {
              py::gil_scoped_release release;
              sub = c.get().split(ranks, name);
            }
            if (!sub) return py::none();
            return py::cast(std::make_unique<PyCommunicator>(std::shared_ptr<Communicator>(std::move(sub))));
          },
          py::arg("ranks"), py::arg("name"),
          "A process set: collective; a Communicator among `ranks` on its members, None on the others.")
      .def("close", &PyCommunicator::close, Gil(),
           "Ends the communicator (an op in flight fails with CommError; threads joined); later calls raise.");
}

}  // namespace muster::runtime::python
