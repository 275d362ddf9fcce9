// Mode: how one training process cooperates with the others.
//
// The training loop (trainer.cc) is the same in every mode; a Mode decides
// who the process is (rank, size), how the processes start from the same
// parameters, how a step's local gradients become updated parameters, and
// how metrics are combined:
//   single     one process, a local optimizer              (single.cc)
//   allreduce  under mpirun: DistributedOptimizer averages gradients over
//              ranks, parameters broadcast from rank 0     (allreduce.cc)
//   ps         TF_CONFIG: SyncReplicasClient pushes gradients to the
//              parameter servers and pulls the new values  (ps.cc)
// All methods are called by the training thread only.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "examples/fashion_mnist/options.h"
#include "runtime/nn/model.h"

namespace muster::examples::fashion_mnist {

class Mode {
 public:
  virtual ~Mode() = default;
  virtual std::string name() const = 0;
  virtual int rank() const = 0;  // worker index; 0 is the chief
  virtual int size() const = 0;  // number of workers
  bool is_chief() const { return rank() == 0; }

  // After every process initialised `model` from the same seed: make all
  // processes hold the same parameters (broadcast, PS initialisation) and
  // restore the newest checkpoint if there is one. Returns the number of
  // steps already done.
  virtual int64_t start(runtime::nn::Model& model, int64_t steps_per_epoch) = 0;

  // The model's gradients hold this process's gradient of step `step`:
  // update the parameters with learning rate `lr`.
  virtual void apply(runtime::nn::Model& model, int64_t step, float lr) = 0;

  // End of an epoch (`step` steps done): the chief may checkpoint.
  virtual void end_epoch(runtime::nn::Model& model, int64_t step) = 0;

  // Sum of `value` over all processes that call it (every process in
  // allreduce mode; only this one otherwise).
  virtual double sum(double value) = 0;
  // Whether processes share the test set between them (then sum() combines).
  virtual bool shares_evaluation() const = 0;

  // Training is over (PS: tell the servers).
  virtual void finish(runtime::nn::Model& model) = 0;
};

std::unique_ptr<Mode> make_single_mode(const TrainOptions& options);
std::unique_ptr<Mode> make_allreduce_mode(const TrainOptions& options);
std::unique_ptr<Mode> make_ps_mode(const TrainOptions& options);

// --elastic: allreduce that survives a lost rank, with its own loop over the
// runtime's elastic run loop (elastic.cc).
void train_elastic(const TrainOptions& options);

}  // namespace muster::examples::fashion_mnist
