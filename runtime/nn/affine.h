// The affine map both models are made of: out = W in + b, over a model's
// weight {out, in} and bias {out} parameters and activations [features x
// columns]. A dense layer applies it to a batch (columns = images), a
// convolution to im2col patches (columns = image pixels).
#pragma once

#include <Eigen/Core>

#include "runtime/nn/layers.h"
#include "runtime/nn/model.h"

namespace muster::runtime::nn::affine {

inline layers::ConstMapMatrix weights(const Parameter& w) {
  return layers::ConstMapMatrix(w.value.data(), w.shape[0], w.shape[1]);
}

// out = W in + b (b added to every column).
template <typename In>
void forward(const Parameter& w, const Parameter& b, const In& in, layers::Matrix& out) {
  out.noalias() = weights(w) * in;
  out.colwise() += Eigen::Map<const Eigen::VectorXf>(b.value.data(), b.shape[0]);
}

// Overwrites the gradients: dW = dout in^T, db = the row sums of dout.
template <typename In>
void gradients(Parameter& w, Parameter& b, const layers::Matrix& dout, const In& in) {
  layers::MapMatrix(w.grad.data(), w.shape[0], w.shape[1]).noalias() = dout * in.transpose();
  Eigen::Map<Eigen::VectorXf>(b.grad.data(), b.shape[0]) = dout.rowwise().sum();
}

// din = W^T dout.
inline void input_gradient(const Parameter& w, const layers::Matrix& dout, layers::Matrix& din) {
  din.noalias() = weights(w).transpose() * dout;
}

// Through a ReLU whose input was `z`: d = d * [z > 0], in place.
inline void relu_backward(const layers::Matrix& z, layers::Matrix& d) { d = (z.array() > 0.0f).select(d, 0.0f); }

}  // namespace muster::runtime::nn::affine
