// The one translation of the runtime's C++ exceptions into Python's, shared
// by both extensions (_muster_runtime and _muster_ps; a small static library,
// muster_python_errors, linked into each).
//
// The classes live in sdk/python/muster/runtime_errors.py (plain Python, all
// muster.MusterError):
//   runtime::TimeoutError    -> PeerTimeoutError (rank: the peer, or None)
//   runtime::CommError       -> CommError        (rank: the peer, or None)
//   runtime::MismatchError   -> MismatchError
//   runtime::InvalidArgument -> InvalidArgument  (also a ValueError)
//   runtime::DataError       -> DataError
//   runtime::Error           -> RuntimeFailure
// Anything else is left to pybind11's own translation.
//
// install_error_translation(m) imports muster.runtime_errors, keeps its
// classes for the life of the process, re-exports them as attributes of `m`
// (m.CommError is muster.runtime_errors.CommError) and registers a
// translator local to `m`, so each extension translates what its own
// functions throw. Call it once, first thing in PYBIND11_MODULE; it throws
// (ImportError) when muster.runtime_errors cannot be imported.
#pragma once

#include <pybind11/pybind11.h>

namespace muster::runtime::python {

void install_error_translation(pybind11::module_& m);

}  // namespace muster::runtime::python
