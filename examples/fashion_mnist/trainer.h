// The training loop shared by every mode.
//
//   1. Load the training and test sets (IDX, --data-dir), build the model
//      and initialise it from --seed (the same on every process).
//   2. mode.start(): agree on the parameters, resume from a checkpoint.
//   3. Each epoch: the DistributedSampler gives this process its share of a
//      fresh shuffle; for each batch, forward + backward, then mode.apply()
//      with the learning rate of this step: the base rate scaled by the
//      number of workers, reached by a linear warm-up (Goyal et al.), then
//      decayed along a cosine.
//   4. The chief prints progress (epoch, step, loss averaged over workers,
//      images/s of the whole job) and checkpoints at each epoch's end.
//   5. Test accuracy on the test set, shared between processes where the
//      mode allows, printed by the chief as `final test_accuracy=...`.
#pragma once

#include <cstdint>

#include "examples/fashion_mnist/mode.h"
#include "examples/fashion_mnist/options.h"

namespace muster::examples::fashion_mnist {

struct TrainResult {
  double test_accuracy = -1.0;  // -1 when not evaluated
  double final_loss = 0.0;      // mean over the last logging window
  double images_per_sec = 0.0;  // whole job, training steps only
  double images_per_cpu_sec = 0.0;  // whole job, per CPU-second of each training thread
  int64_t steps = 0;            // steps done by this process (including resumed)
};

TrainResult train(const TrainOptions& options, Mode& mode);

// Learning rate at `step` of `total_steps`: from `base` up to
// `base * workers` over `warmup_steps` (no warm-up for one worker), then a
// cosine decay to 5% of that at the end.
float learning_rate(float base, int workers, int warmup_steps, int64_t step, int64_t total_steps);

}  // namespace muster::examples::fashion_mnist
