// _muster_runtime's view of musterd's world rendezvous (elastic clusters),
// for muster.torch.elastic: which generation this process's world is, a
// client that watches for a membership change (rank 0's poller) and reports
// what a recovery redid. The join itself happens where the world forms
// (bootstrap_from_env, runtime/comm/musterd/).
#include <pybind11/pybind11.h>

#include "runtime/comm/musterd/rendezvous_client.h"
#include "runtime/python/bindings.h"

namespace muster::runtime::python {

namespace musterd = comm::musterd;

void bind_rendezvous(py::module_& m) {
  m.def(
      "rendezvous_assignment",
      [] {
        const auto a = musterd::last_assignment();
        return py::make_tuple(a.generation, a.rank, a.size);
      },
      "(generation, rank, size) of the world this process joined last through musterd; (0, 0, 0) for none");

  py::class_<musterd::RendezvousClient>(m, "RendezvousClient",
                                        "musterd's world rendezvous, as MUSTER_RENDEZVOUS_* describe it")
      .def(py::init([] {
        auto s = musterd::RendezvousSettings::from_env();
        if (!s) throw InvalidArgument("MUSTER_RENDEZVOUS_URL is not set: this process is not a rank of an elastic cluster");
        return std::make_unique<musterd::RendezvousClient>(*s);
      }))
      .def(
          "world",
          [](musterd::RendezvousClient& c, int generation, int wait_ms) {
            clusterspec::rendezvous::WorldView v;
            {
              py::gil_scoped_release release;
              v = c.world(generation, std::chrono::milliseconds(wait_ms));
            }
            py::dict d;
            d["generation"] = v.generation;
            d["changed"] = v.changed;
            d["size"] = v.size;
            d["waiting"] = v.waiting;
            return d;
          },
          py::arg("generation"), py::arg("wait_ms") = 0,
          "{generation, changed, size, waiting}: whether `generation` is over or a newcomer waits; waits up to "
          "wait_ms for that")
      .def(
          "report",
          [](musterd::RendezvousClient& c, int generation, int batches_redone) {
            py::gil_scoped_release release;
            c.report({generation, batches_redone, true});
          },
          py::arg("generation"), py::arg("batches_redone"),
          "Records that `generation` completed its first step, having redone `batches_redone` batches");
}

}  // namespace muster::runtime::python
