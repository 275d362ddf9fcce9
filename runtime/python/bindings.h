// The pieces of the _muster_runtime extension (module.cc puts them together;
// the enum parsers they share are parsers.h).
//
// Layers: this extension binds the C++ runtime as it is (buffers are raw
// addresses plus counts, dtypes and ops are their names); sdk/python/muster/
// runtime.py turns numpy arrays into those calls and muster/torch/ builds
// Horovod's PyTorch API on it. Nothing here knows about numpy or torch,
// except that gradient views are handed out as numpy arrays.
//
// Threads and the GIL: every call that may wait on peers (collectives,
// Handle.wait, synchronize, close) releases the GIL, so other Python threads
// run while a rank waits. The runtime's own threads (the Communicator's
// progress thread, the optimizer's communication thread) never call into
// Python.
//
// Errors: the runtime's C++ exceptions become the classes of
// muster.runtime_errors (errors.h, shared with _muster_ps), all subclasses
// of muster.MusterError; CommError and PeerTimeoutError carry `rank`.
#pragma once

#include <pybind11/pybind11.h>

#include <memory>
#include <string>

#include "runtime/comm/bootstrap.h"
#include "runtime/comm/communicator.h"

namespace muster::runtime::python {

namespace py = pybind11;

void bind_communicator(py::module_& m);
void bind_optimizer(py::module_& m);
void bind_rendezvous(py::module_& m);  // rendezvous_binding.cc: elastic clusters
void bind_store(py::module_& m);       // store_binding.cc: FileStore

// The runtime KvStore behind a _muster_runtime.FileStore, or nullptr for any
// other object (a Python store, called back through PyKvStore).
std::shared_ptr<comm::KvStore> native_store_of(py::handle obj);

// The comm::Communicator behind a _muster_runtime.Communicator object (shared:
// an optimizer keeps it alive).
std::shared_ptr<comm::Communicator> communicator_of(py::handle obj);

}  // namespace muster::runtime::python
