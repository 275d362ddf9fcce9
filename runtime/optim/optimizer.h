// Optimizer: updates parameters in place from their gradients.
//
// Shared by both training modes: the allreduce DistributedOptimizer wraps one
// (runtime/distributed/), and each parameter server applies one to the
// variable slices it holds (runtime/ps/). Parameters and gradients are views
// of the caller's float32 memory; the optimizer never copies them.
//
// State is per position in the parameter list: pass the same parameters in
// the same order on every step. The state (momentum buffers, Adam moments)
// and the iteration count can be read and written through state() and
// set_iterations(), so it can be broadcast from rank 0 or checkpointed.
//
// Usage:
//   auto opt = muster::runtime::optim::make_adam({.learning_rate = 1e-3f});
//   opt->step({{w.data(), dw.data(), w.size()}, {b.data(), db.data(), b.size()}});
//
// Not thread-safe: one caller at a time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace muster::runtime::optim {

struct ParamRef {
  float* value = nullptr;
  const float* grad = nullptr;
  std::size_t size = 0;
};

// A named buffer of optimizer state, e.g. "momentum/0", "adam_m/3".
struct StateRef {
  std::string name;
  float* data = nullptr;
  std::size_t size = 0;
};

class Optimizer {
 public:
  virtual ~Optimizer() = default;

  // "sgd" or "adam".
  virtual std::string name() const = 0;

  // Allocates zeroed state for parameters of these sizes. step() calls it on
  // first use; call it yourself to broadcast or restore state before that.
  virtual void init(const std::vector<std::size_t>& sizes) = 0;

  // One update of every parameter from its gradient; increments iterations().
  virtual void step(const std::vector<ParamRef>& params) = 0;

  // Views of every state buffer, in a fixed order (empty before init()).
  virtual std::vector<StateRef> state() = 0;

  int64_t iterations() const { return iterations_; }
  void set_iterations(int64_t n) { iterations_ = n; }

  // The learning rate can change between steps (warm-up, decay).
  float learning_rate() const { return learning_rate_; }
  void set_learning_rate(float lr) { learning_rate_ = lr; }

 protected:
  explicit Optimizer(float learning_rate) : learning_rate_(learning_rate) {}
  int64_t iterations_ = 0;
  float learning_rate_;
};

struct SgdOptions {
  float learning_rate = 0.01f;
  float momentum = 0.0f;       // 0 disables the momentum buffer
  bool nesterov = false;
  float weight_decay = 0.0f;   // L2, added to the gradient
};

struct AdamOptions {
  float learning_rate = 1e-3f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float epsilon = 1e-8f;
  float weight_decay = 0.0f;   // L2, added to the gradient
};

std::unique_ptr<Optimizer> make_sgd(const SgdOptions& options);
std::unique_ptr<Optimizer> make_adam(const AdamOptions& options);

// By name, for command lines and config: "sgd", "momentum" (sgd with 0.9), "adam".
std::unique_ptr<Optimizer> make_optimizer(const std::string& name, float learning_rate);

}  // namespace muster::runtime::optim
