// FileStore for Python: the runtime's own file store (runtime/comm/kv/
// file_store.cc), not a second one written in Python, so a world formed from
// Python and one formed from C++ share a directory by construction. Given to
// Communicator(store=...), it is used natively: no call back into Python
// (and no GIL) per key while the world forms.
//
//   store = _muster_runtime.FileStore("/shared/job-7")
//   store.set("a/b", b"v"); store.get(["a/b"], 1000)  # [b"v"]
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "runtime/comm/kv_bootstrap.h"
#include "runtime/python/bindings.h"

namespace muster::runtime::python {

namespace {

struct PyFileStore {
  std::string path;
  std::shared_ptr<comm::KvStore> store;
};

}  // namespace

std::shared_ptr<comm::KvStore> native_store_of(py::handle obj) {
  if (!py::isinstance<PyFileStore>(obj)) return nullptr;
  return obj.cast<PyFileStore&>().store;
}

void bind_store(py::module_& m) {
  py::class_<PyFileStore>(m, "FileStore",
                          "A store in a directory every process reaches (one machine, or a shared file system): key "
                          "'a/b' is the file <path>/a/b, written once, atomically (the runtime's C++ file store).")
      .def(py::init([](const std::string& path) {
             return PyFileStore{path, comm::make_file_kv_store(path)};
           }),
           py::arg("path"))
      .def_readonly("path", &PyFileStore::path)
      .def(
          "set",
          [](PyFileStore& s, const std::string& key, const py::bytes& value) {
            std::string bytes = value;
            py::gil_scoped_release release;
            s.store->set(key, bytes);
          },
          py::arg("key"), py::arg("value"), "Stores value under key; InvalidArgument if the key was set before.")
      .def(
          "get",
          [](PyFileStore& s, const std::vector<std::string>& keys, int64_t timeout_ms) {
            std::vector<std::string> values;
            {
              py::gil_scoped_release release;
              values = s.store->get(keys, std::chrono::milliseconds(timeout_ms));
            }
            py::list out;
            for (const auto& v : values) out.append(py::bytes(v));
            return out;
          },
          py::arg("keys"), py::arg("timeout_ms"),
          "The values of all keys, in order, once every one exists; PeerTimeoutError names the keys still missing.")
      .def("__repr__", [](const PyFileStore& s) { return "FileStore('" + s.path + "')"; });
}

}  // namespace muster::runtime::python
