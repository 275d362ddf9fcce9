// _muster_runtime: the C++ runtime as a CPython module (see bindings.h). This
// file only assembles it; each binding lives in its own unit.
#include <pybind11/pybind11.h>

#include "runtime/python/bindings.h"
#include "runtime/python/errors.h"

PYBIND11_MODULE(_muster_runtime, m) {
  m.doc() = "muster's C++ training runtime (collectives, DistributedOptimizer); use muster.runtime or muster.torch";
  muster::runtime::python::install_error_translation(m);
  muster::runtime::python::bind_store(m);
  muster::runtime::python::bind_communicator(m);
  muster::runtime::python::bind_optimizer(m);
  muster::runtime::python::bind_rendezvous(m);
}
