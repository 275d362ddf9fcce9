// Checkpoints of the single-process and allreduce modes: the model's
// parameters, the optimizer's state and the number of steps done. (PS mode
// checkpoints on the parameter servers' side, see runtime/ps/checkpoint.h.)
//
// File <dir>/fashion_mnist.ckpt, written to a temporary file, flushed and
// renamed, so a reader sees a whole checkpoint or the previous one. Layout
// (native endianness): "MFMNCKP1" | i64 steps | i64 optimizer iterations |
// u32 n | n x (u32 name bytes | name | u64 floats | floats).
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
// Throws DataError naming the file when it does not fit this model.
std::optional<int64_t> load_checkpoint(const std::string& dir, runtime::nn::Model& model,
                                       runtime::optim::Optimizer& optimizer);

}  // namespace muster::examples::fashion_mnist
