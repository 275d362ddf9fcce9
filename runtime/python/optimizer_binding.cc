// DistributedOptimizer for Python: the runtime's fusion buckets and
// communication thread averaging gradients that a Python framework computes,
// while the framework's own optimizer applies them.
//
// The gradients live in the optimizer's arena (shared memory when the whole
// job is on one host, so buckets run the direct allreduce); gradient(i)
// hands out a numpy view of gradient i, which muster.torch installs as the
// parameter's .grad so that autograd accumulates straight into it (PyTorch
// DDP's gradient_as_bucket_view). The view keeps this object alive, and
// this object the memory, also after close().
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "runtime/distributed/distributed_optimizer.h"
#include "runtime/error.h"
#include "runtime/optim/optimizer.h"
#include "runtime/python/bindings.h"

namespace muster::runtime::python {
namespace {

// The update is the Python framework's: step() only counts.
class ExternalOptimizer final : public optim::Optimizer {
 public:
  ExternalOptimizer() : Optimizer(0.0f) {}
  std::string name() const override { return "external"; }
  void init(const std::vector<std::size_t>&) override {}
  void step(const std::vector<optim::ParamRef>&) override { ++iterations_; }
  std::vector<optim::StateRef> state() override { return {}; }
};

class PyDistributedOptimizer {
 public:
  PyDistributedOptimizer(std::shared_ptr<comm::Communicator> comm, const distributed::DistributedOptions& options)
      : comm_(std::move(comm)),
        opt_(std::make_unique<distributed::DistributedOptimizer>(*comm_, std::make_unique<ExternalOptimizer>(),
                                                                  options)) {}

  distributed::DistributedOptimizer& get() {
    if (!opt_) throw InvalidArgument("the DistributedOptimizer was closed");
    return *opt_;
  }
  int add_parameter(const std::string& name, std::uintptr_t value, std::size_t size, std::uintptr_t grad) {
    sizes_.push_back(size);
    return get().add_parameter(name, reinterpret_cast<float*>(value), reinterpret_cast<float*>(grad), size);
  }
  std::size_t size_of(int index) const { return sizes_.at(static_cast<std::size_t>(index)); }
  // The gradients' memory stays with this object (the numpy views of it
  // keep it alive), so .grad tensors keep their values after close().
  void close() {
    if (opt_) kept_ = opt_->release_gradient_memory();
    opt_.reset();
    comm_.reset();
  }

 private:
  std::unique_ptr<comm::SharedBuffer> kept_;  // after close(): the gradients' memory
  std::vector<std::size_t> sizes_;
  std::shared_ptr<comm::Communicator> comm_;  // outlives opt_ (declared first)
  std::unique_ptr<distributed::DistributedOptimizer> opt_;
};

}  // namespace

void bind_optimizer(py::module_& m) {
  using Gil = py::call_guard<py::gil_scoped_release>;
  py::class_<PyDistributedOptimizer>(m, "DistributedOptimizer",
                                     "Averages float32 gradients in fusion buckets on a background thread.")
      .def(py::init([](py::object comm, std::size_t fusion_threshold_bytes, bool fp16, const std::string& timeline,
                       std::size_t segment_bytes) {
             distributed::DistributedOptions o;
             o.fusion_threshold_bytes = fusion_threshold_bytes;
             o.compression = fp16 ? distributed::Compression::kFp16 : distributed::Compression::kNone;
             o.timeline_path = timeline;
             if (segment_bytes > 0) o.segment_bytes = segment_bytes;
             return std::make_unique<PyDistributedOptimizer>(communicator_of(comm), o);
           }),
           py::arg("comm"), py::arg("fusion_threshold_bytes") = 0, py::arg("fp16") = false,
           py::arg("timeline") = "", py::arg("segment_bytes") = 0)
      .def("add_parameter", &PyDistributedOptimizer::add_parameter, py::arg("name"), py::arg("value"),
           py::arg("size"), py::arg("grad") = 0,
           "Registers a float32 parameter of `size` elements and its gradient (0: the optimizer owns it, in "
           "shared memory; else the caller's buffer, which must outlive the optimizer); returns its index.")
      .def(
          "gradient",
          [](py::object self, int index) {
            auto& o = self.cast<PyDistributedOptimizer&>();
            float* data = nullptr;
            {
              py::gil_scoped_release release;  // the first call is collective (registration check)
              data = o.get().gradient(index);
            }
            const auto n = static_cast<py::ssize_t>(o.size_of(index));
            return py::array_t<float>({n}, {static_cast<py::ssize_t>(sizeof(float))}, data, self);
          },
          py::arg("index"), "A numpy view of gradient `index` (collective on first call).")
      .def(
          "grad_ready", [](PyDistributedOptimizer& o, int index) { o.get().grad_ready(index); }, py::arg("index"))
      .def(
          "synchronize", [](PyDistributedOptimizer& o) { o.get().synchronize(); }, Gil())
      .def_property_readonly("bucket_count", [](PyDistributedOptimizer& o) { return o.get().bucket_count(); })
      .def_property_readonly("gradients_direct",
                             [](PyDistributedOptimizer& o) { return o.get().gradients_direct(); })
      .def_property_readonly("fusion_threshold_bytes", [](PyDistributedOptimizer& o) {
        return o.get().options().fusion_threshold_bytes;
      })
      .def("close", &PyDistributedOptimizer::close, Gil());
}

}  // namespace muster::runtime::python
