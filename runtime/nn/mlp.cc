#include "runtime/nn/mlp.h"

#include "runtime/nn/affine.h"
#include "runtime/nn/layers.h"

namespace muster::runtime::nn {

Mlp::Mlp(const ModelOptions& o) {
  params_.reserve(6);
  w1_ = add_parameter("fc1/weight", {o.hidden1, 784}, 784);
  b1_ = add_parameter("fc1/bias", {o.hidden1}, 0);
  w2_ = add_parameter("fc2/weight", {o.hidden2, o.hidden1}, o.hidden1);
  b2_ = add_parameter("fc2/bias", {o.hidden2}, 0);
  w3_ = add_parameter("fc3/weight", {10, o.hidden2}, o.hidden2);
  b3_ = add_parameter("fc3/bias", {10}, 0);
}

void Mlp::run_forward(const float* images, int n) {
  const layers::ConstMapMatrix x(images, 784, n);
  affine::forward(params_[w1_], params_[b1_], x, z1_);
  a1_ = z1_.cwiseMax(0.0f);
  affine::forward(params_[w2_], params_[b2_], a1_, z2_);
  a2_ = z2_.cwiseMax(0.0f);
  affine::forward(params_[w3_], params_[b3_], a2_, z3_);
}

void Mlp::forward(const float* images, int n, float* logits) {
  run_forward(images, n);
  layers::MapMatrix(logits, 10, n) = z3_;
}

float Mlp::forward_backward(const float* images, const int32_t* labels, int n) {
  run_forward(images, n);
  const float loss = layers::softmax_cross_entropy(z3_, labels, dz3_);
  const layers::ConstMapMatrix x(images, 784, n);

  affine::gradients(params_[w3_], params_[b3_], dz3_, a2_);
  affine::input_gradient(params_[w3_], dz3_, da2_);
  affine::relu_backward(z2_, da2_);  // now dz2

  affine::gradients(params_[w2_], params_[b2_], da2_, a1_);
  affine::input_gradient(params_[w2_], da2_, da1_);
  affine::relu_backward(z1_, da1_);  // now dz1

  affine::gradients(params_[w1_], params_[b1_], da1_, x);
  return loss;
}

std::unique_ptr<Model> make_mlp(const ModelOptions& options) { return std::make_unique<Mlp>(options); }

}  // namespace muster::runtime::nn
