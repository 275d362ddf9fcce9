// _muster_ps: the parameter-server client (runtime/ps/client.h) for Python,
// framework-neutral (numpy arrays; muster/torch/ps.py wraps it for PyTorch).
//
//   c = _muster_ps.Client(optimizer="momentum", learning_rate=0.05)   # TF_CONFIG from the environment
//   c.register_variables([("w", w_array), ("b", b_array)])     # float32, C-contiguous, writable
//   step = c.initialize_or_wait()          # the chief initialises (or resumes), the others wait
//   step = c.step([dw_array, db_array])    # push the gradients, pull the new values into w, b
//   c.done()
//
// Zero copy: the registered arrays are the client's parameter memory (pulls
// write into them; the client keeps a reference to each, so they stay
// alive), gradients are read in place. Every network call releases the GIL.
//
// Errors: the runtime's C++ exceptions become the classes of
// muster.runtime_errors through the translation shared with _muster_runtime
// (runtime/python/errors.h: RuntimeFailure,
// InvalidArgument, MismatchError, CommError, PeerTimeoutError, DataError; all
// muster.MusterError). CommError/PeerTimeoutError name the PS task that was
// lost ("ps task 0 (127.0.0.1:4000) closed the connection ...") or say that
// the other workers did not arrive in time; their `rank` is the PS task's
// index, or None.
//
// Threads: one thread at a time per Client (the C++ client is not thread-safe).
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "runtime/error.h"
#include "runtime/ps/client.h"
#include "runtime/ps/cluster.h"
#include "runtime/python/errors.h"

namespace py = pybind11;
namespace ps = muster::runtime::ps;
namespace rt = muster::runtime;

namespace {

// A float32, C-contiguous view of `a`'s memory; ValueError naming `what` otherwise.
float* float_data(const py::array& a, const std::string& what, bool writable) {
  if (!py::isinstance<py::array_t<float>>(a) || a.dtype().kind() != 'f' || a.itemsize() != 4) {
    throw rt::InvalidArgument(what + ": expected float32, got " + std::string(py::str(a.dtype())));
  }
  if (!(a.flags() & py::array::c_style)) throw rt::InvalidArgument(what + ": not C-contiguous (call .contiguous())");
  if (writable && !a.writeable()) throw rt::InvalidArgument(what + ": read-only array");
  if (a.size() == 0) throw rt::InvalidArgument(what + ": empty");
  return static_cast<float*>(const_cast<void*>(a.data()));
}

class Client {
 public:
  Client(int replicas_to_aggregate, int total_num_replicas, const std::string& optimizer, float learning_rate,
         const std::string& mode, const std::string& checkpoint_dir, int checkpoint_every, int timeout_ms)
      : cluster_(ps::PsCluster::from_env()) {
    if (cluster_.task_type == "ps") {
      throw rt::InvalidArgument("TF_CONFIG says this task is a ps task: run muster-ps there, not a worker script");
    }
    if (mode != "sync" && mode != "async") throw rt::InvalidArgument("mode must be \"sync\" or \"async\", got \"" + mode + "\"");
    ps::ClientOptions o;
    o.replicas_to_aggregate = replicas_to_aggregate;
    o.total_num_replicas = total_num_replicas;
    o.optimizer = optimizer;
    o.learning_rate = learning_rate;
    o.mode = mode == "sync" ? ps::Mode::kSync : ps::Mode::kAsync;
    o.checkpoint_dir = checkpoint_dir;
    o.checkpoint_every = checkpoint_every;
    if (timeout_ms > 0) o.timeout_ms = timeout_ms;
    client_ = std::make_unique<ps::SyncReplicasClient>(cluster_, std::move(o));
  }

  void register_variables(const std::vector<std::pair<std::string, py::array>>& variables) {
    std::vector<ps::Variable> vars;
    for (const auto& [name, a] : variables) {
      vars.push_back({name, float_data(a, "variable '" + name + "'", true), static_cast<std::size_t>(a.size())});
    }
    client_->register_variables(vars);
    arrays_.clear();
    for (const auto& v : variables) arrays_.push_back(v.second);
    sizes_.clear();
    for (const auto& v : vars) sizes_.push_back(v.size);
  }

  int64_t initialize_or_wait() {
    py::gil_scoped_release release;
    return client_->initialize_or_wait();
  }

  int64_t step(const std::vector<py::array>& grads) {
    auto g = gradients(grads);
    py::gil_scoped_release release;
    return client_->step(g);
  }

  void push_gradients(int64_t step, const std::vector<py::array>& grads) {
    auto g = gradients(grads);
    py::gil_scoped_release release;
    client_->push_gradients(step, g);
  }

  int64_t pull(int64_t min_step) {
    py::gil_scoped_release release;
    return client_->pull(min_step);
  }

  std::string save_checkpoint() {
    py::gil_scoped_release release;
    return client_->save_checkpoint();
  }

  void done() {
    py::gil_scoped_release release;
    client_->done();
  }

  py::dict stats() const {
    const auto& s = client_->stats();
    py::dict d;
    d["bytes_pushed"] = s.bytes_pushed;
    d["bytes_pulled"] = s.bytes_pulled;
    d["checkpoints_written"] = s.checkpoints_written;
    d["last_checkpoint"] = s.last_checkpoint;
    d["stale_dropped"] = s.stale_dropped;
    d["stale_steps"] = s.stale_steps;
    return d;
  }

  const ps::SyncReplicasClient& client() const { return *client_; }
  const ps::PsCluster& cluster() const { return cluster_; }

 private:
  std::vector<const float*> gradients(const std::vector<py::array>& grads) const {
    if (grads.size() != sizes_.size()) {
      throw rt::InvalidArgument(std::to_string(grads.size()) + " gradients for " + std::to_string(sizes_.size()) +
                            " registered variables");
    }
    std::vector<const float*> out;
    for (std::size_t i = 0; i < grads.size(); ++i) {
      const std::string what = "gradient " + std::to_string(i);
      out.push_back(float_data(grads[i], what, false));
      if (static_cast<std::size_t>(grads[i].size()) != sizes_[i]) {
        throw rt::InvalidArgument(what + ": " + std::to_string(grads[i].size()) + " elements, its variable has " +
                              std::to_string(sizes_[i]));
      }
    }
    return out;
  }

  ps::PsCluster cluster_;
  std::unique_ptr<ps::SyncReplicasClient> client_;
  std::vector<py::array> arrays_;  // keeps the registered memory alive
  std::vector<std::size_t> sizes_;
};

}  // namespace

PYBIND11_MODULE(_muster_ps, m) {
  m.doc() = "muster's parameter-server client (SyncReplicas semantics) over numpy arrays";
  muster::runtime::python::install_error_translation(m);

  py::class_<Client>(m, "Client")
      .def(py::init<int, int, const std::string&, float, const std::string&, const std::string&, int, int>(),
           py::kw_only(), py::arg("replicas_to_aggregate") = 0, py::arg("total_num_replicas") = 0,
           py::arg("optimizer") = "sgd", py::arg("learning_rate") = 0.01f, py::arg("mode") = "sync",
           py::arg("checkpoint_dir") = "", py::arg("checkpoint_every") = 0, py::arg("timeout_ms") = 0,
           "Reads TF_CONFIG (and the cluster's secret) from the environment.")
      .def("register_variables", &Client::register_variables, py::arg("variables"),
           "[(name, float32 array)], the same names and sizes in the same order on every worker")
      .def("initialize_or_wait", &Client::initialize_or_wait)
      .def("step", &Client::step, py::arg("gradients"))
      .def("push_gradients", &Client::push_gradients, py::arg("step"), py::arg("gradients"))
      .def("pull", &Client::pull, py::arg("min_step"))
      .def("save_checkpoint", &Client::save_checkpoint)
      .def("done", &Client::done)
      .def("stats", &Client::stats)
      .def_property_readonly("global_step", [](const Client& c) { return c.client().global_step(); })
      .def_property_readonly("worker_index", [](const Client& c) { return c.client().worker_index(); })
      .def_property_readonly("is_chief", [](const Client& c) { return c.client().is_chief(); })
      .def_property_readonly("num_workers", [](const Client& c) { return c.cluster().num_workers(); })
      .def_property_readonly("num_ps", [](const Client& c) { return static_cast<int>(c.cluster().ps.size()); })
      .def_property_readonly("task_type", [](const Client& c) { return c.cluster().task_type; })
      .def_property_readonly("task_index", [](const Client& c) { return c.cluster().task_index; });
}
