// The training program's options, from its command line (main.cc).
#pragma once

#include <cstdint>
#include <string>

namespace muster::examples::fashion_mnist {

struct TrainOptions {
  std::string model = "mlp";           // mlp | cnn
  int epochs = 10;
  int batch_size = 64;                 // per worker
  float lr = 0.0f;                     // per-worker base rate; 0: the optimizer's default
  std::string optimizer = "momentum";  // sgd | momentum | adam
  std::string data_dir = "/usr/share/datasets/fashion-mnist";
  std::string checkpoint_dir;          // "": no checkpoints
  uint64_t seed = 42;
  int threads = 1;                     // Eigen threads per process
  int64_t limit = 0;                   // first N training images only (0: all)
  int64_t test_limit = 0;              // first N test images only (0: all)
  int log_every = 100;                 // steps between progress lines
  int warmup_steps = -1;               // linear warm-up to lr * workers (-1: one epoch)
  int64_t max_steps = 0;               // stop after this many steps per worker (0: the epochs)
  bool evaluate = true;                // test accuracy at the end
  std::string compression = "none";    // allreduce wire format: none | fp16
  bool elastic = false;                // survive a lost rank (elastic.cc, runtime/elastic)
  int commit_every = 10;               // --elastic: steps between commits of the state
  std::string params_out;              // --elastic: each rank writes its final parameters here
};

// The default learning rate of each optimizer for these models.
inline float default_lr(const std::string& optimizer) { return optimizer == "adam" ? 1e-3f : 0.05f; }

}  // namespace muster::examples::fashion_mnist
