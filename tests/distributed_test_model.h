// A tiny linear-regression model for the DistributedOptimizer tests.
//
// The weight vector w (D floats) is cut into tensors of the given sizes,
// each a registered parameter. Rank r's batch at step s is deterministic
// (make_batch), so a test can also train one model on the concatenation of
// every rank's batch and compare. Loss: mean over the batch of (x.w - y)^2/2;
// gradient: X^T (Xw - y) / B, computed in double.
#pragma once

#include <cmath>
#include <cstdint>
#include <numeric>
#include <vector>

#include "runtime/optim/optimizer.h"

namespace muster::runtime::distributed::testing {

struct Batch {
  std::size_t rows = 0;
  std::vector<double> x;  // rows x D
  std::vector<double> y;
};

inline Batch make_batch(std::size_t dim, std::size_t rows, uint64_t seed) {
  Batch b;
  b.rows = rows;
  uint64_t s = seed * 6364136223846793005ull + 1442695040888963407ull;
  auto next = [&] {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<double>(s >> 11) / static_cast<double>(1ull << 53) * 2.0 - 1.0;
  };
  for (std::size_t r = 0; r < rows; ++r) {
    double y = 0;
    for (std::size_t j = 0; j < dim; ++j) {
      const double v = next();
      b.x.push_back(v);
      y += v * std::sin(static_cast<double>(j) + 1.0);
    }
    b.y.push_back(y + 0.01 * next());
  }
  return b;
}

inline Batch concat(const std::vector<Batch>& parts) {
  Batch out;
  for (const auto& p : parts) {
    out.rows += p.rows;
    out.x.insert(out.x.end(), p.x.begin(), p.x.end());
    out.y.insert(out.y.end(), p.y.begin(), p.y.end());
  }
  return out;
}

// Parameters and gradients of the tensors; `arena` puts all gradients back
// to back in one array (so fusion buckets reduce them in place).
class LinearModel {
 public:
  LinearModel(const std::vector<std::size_t>& sizes, bool arena) : sizes_(sizes) {
    dim_ = std::accumulate(sizes.begin(), sizes.end(), std::size_t{0});
    values_.resize(sizes.size());
    for (std::size_t t = 0; t < sizes.size(); ++t) values_[t].assign(sizes[t], 0.0f);
    if (arena) {
      arena_.assign(dim_, 0.0f);
      std::size_t off = 0;
      for (std::size_t s : sizes) {
        grad_ptrs_.push_back(arena_.data() + off);
        off += s;
      }
    } else {
      separate_.resize(sizes.size());
      for (std::size_t t = 0; t < sizes.size(); ++t) {
        separate_[t].assign(sizes[t] + 1, 0.0f);  // +1: never adjacent by accident
        grad_ptrs_.push_back(separate_[t].data());
      }
    }
    // Deterministic non-zero start, different per tensor.
    for (std::size_t t = 0; t < sizes.size(); ++t)
      for (std::size_t i = 0; i < sizes[t]; ++i) values_[t][i] = 0.1f * std::cos(static_cast<float>(t * 31 + i));
  }

  std::size_t dim() const { return dim_; }
  std::size_t tensors() const { return sizes_.size(); }
  std::size_t size(std::size_t t) const { return sizes_[t]; }
  float* value(std::size_t t) { return values_[t].data(); }
  float* grad(std::size_t t) { return grad_ptrs_[t]; }

  std::vector<float> flat_values() const {
    std::vector<float> out;
    for (const auto& v : values_) out.insert(out.end(), v.begin(), v.end());
    return out;
  }

  // Fills every gradient from the batch; returns the loss.
  double backward(const Batch& b) {
    std::vector<double> w;
    for (const auto& v : values_) w.insert(w.end(), v.begin(), v.end());
    std::vector<double> g(dim_, 0.0);
    double loss = 0;
    for (std::size_t r = 0; r < b.rows; ++r) {
      const double* x = b.x.data() + r * dim_;
      double pred = 0;
      for (std::size_t j = 0; j < dim_; ++j) pred += x[j] * w[j];
      const double err = pred - b.y[r];
      loss += 0.5 * err * err;
      for (std::size_t j = 0; j < dim_; ++j) g[j] += err * x[j];
    }
    std::size_t off = 0;
    for (std::size_t t = 0; t < sizes_.size(); ++t) {
      for (std::size_t i = 0; i < sizes_[t]; ++i) grad_ptrs_[t][i] = static_cast<float>(g[off + i] / b.rows);
      off += sizes_[t];
    }
    return loss / static_cast<double>(b.rows);
  }

 private:
  std::vector<std::size_t> sizes_;
  std::size_t dim_ = 0;
  std::vector<std::vector<float>> values_;
  std::vector<float> arena_;
  std::vector<std::vector<float>> separate_;
  std::vector<float*> grad_ptrs_;
};

// The deterministic batch of `rank` at `step`.
inline Batch rank_batch(std::size_t dim, std::size_t rows, int rank, int step) {
  return make_batch(dim, rows, static_cast<uint64_t>(rank) * 1000 + static_cast<uint64_t>(step));
}

inline std::unique_ptr<optim::Optimizer> test_momentum(float lr) {
  optim::SgdOptions o;
  o.learning_rate = lr;
  o.momentum = 0.9f;
  return optim::make_sgd(o);
}

// One process trained with momentum SGD on the concatenation of every rank's
// batch at each step: what data-parallel training must reproduce.
inline std::vector<float> train_reference(const std::vector<std::size_t>& sizes, int ranks, int steps,
                                          std::size_t rows, float lr) {
  LinearModel model(sizes, true);
  auto opt = test_momentum(lr);
  for (int s = 0; s < steps; ++s) {
    std::vector<Batch> parts;
    for (int r = 0; r < ranks; ++r) parts.push_back(rank_batch(model.dim(), rows, r, s));
    model.backward(concat(parts));
    std::vector<optim::ParamRef> refs;
    for (std::size_t t = 0; t < model.tensors(); ++t) refs.push_back({model.value(t), model.grad(t), model.size(t)});
    opt->step(refs);
  }
  return model.flat_values();
}

}  // namespace muster::runtime::distributed::testing
