// Checkpoints of the single-process and allreduce modes: the model's
// parameters, the optimizer's state and the number of steps done. (PS mode
// checkpoints on the parameter servers' side, see runtime/ps/checkpoint.h.)
//
// File <dir>/fashion_mnist.ckpt in the one checkpoint format
// (api/base/checkpoint_file.h: little-endian, length and CRC-32 checked,
// written atomically, so a reader sees a whole checkpoint or the previous
// one): kind "fashion_mnist", counters "steps" and "optimizer_iterations",
// tensors: the model's parameters, then "optimizer/<slot>" for each buffer
// of the optimizer's state.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "runtime/nn/model.h"
#include "runtime/optim/optimizer.h"

namespace muster::examples::fashion_mnist {

std::string checkpoint_path(const std::string& dir);

// Throws runtime::Error on an I/O failure.
void save_checkpoint(const std::string& dir, int64_t steps, const runtime::nn::Model& model,
                     runtime::optim::Optimizer& optimizer);

// Restores into `model` and `optimizer` (initialised for the model's sizes)
// and returns the steps done, or nothing when `dir` holds no checkpoint.
// Throws DataError naming the file when it is damaged (truncated, bad
// magic, another version, a size or checksum mismatch) or does not fit this
// model; Error when it exists but cannot be read.
std::optional<int64_t> load_checkpoint(const std::string& dir, runtime::nn::Model& model,
                                       runtime::optim::Optimizer& optimizer);

}  // namespace muster::examples::fashion_mnist
