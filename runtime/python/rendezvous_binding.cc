// _muster_runtime's view of musterd's world rendezvous (elastic clusters),
// for muster.torch.elastic: which generation this process's world is, a
// client that watches for a membership change (rank 0's poller) and reports
// what a recovery redid. The join itself happens where the world forms
// (bootstrap_from_env, runtime/comm/musterd/). The watcher and the report
// are the C++ elastic loop's own (runtime/elastic/membership.h), so both
// loops watch and report one way.
#include <pybind11/pybind11.h>

#include "runtime/comm/musterd/rendezvous_client.h"
#include "runtime/elastic/membership.h"
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
        if (!s) {
          throw InvalidArgument(std::string(clusterspec::rendezvous::kEnvRendezvousUrl) +
                                " is not set: this process is not a rank of an elastic cluster");
        }
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

  py::class_<elastic::MusterdMembership>(m, "MembershipWatch",
                                         "rank 0's watch over its generation (runtime/elastic/membership.h): a "
                                         "thread long-polls musterd until the generation is over or a newcomer "
                                         "waits; it ends when the object goes")
      .def(py::init([](int generation) {
             auto s = musterd::RendezvousSettings::from_env();
             if (!s) {
               throw InvalidArgument(std::string(clusterspec::rendezvous::kEnvRendezvousUrl) +
                                     " is not set: this process is not a rank of an elastic cluster");
             }
             return std::make_unique<elastic::MusterdMembership>(*s, generation);
           }),
           py::arg("generation"))
      .def(
          "changed",
          [](elastic::MusterdMembership& w) {
            bool newcomers = false;
            const bool changed = w.changed(&newcomers);
            return py::make_tuple(changed, newcomers);
          },
          "(changed, newcomers): whether the generation is over or a newcomer waits, and whether someone new "
          "will join (then the state must be synced)");

  m.def(
      "report_recovery",
      [](int generation, int64_t batches_redone) { elastic::report_to_musterd(generation, batches_redone); },
      py::arg("generation"), py::arg("batches_redone"),
      "Tells musterd, from a background thread, that `generation` completed its first step having redone "
      "`batches_redone` batches; a no-op outside an elastic cluster");
}

}  // namespace muster::runtime::python
