#include "muster/runtime/nn/mlp.h"

#include "muster/runtime/nn/layers.h"

namespace muster::runtime::nn {
namespace {

using layers::ConstMapMatrix;
using layers::MapMatrix;

ConstMapMatrix weights(const Parameter& p) { return ConstMapMatrix(p.value.data(), p.shape[0], p.shape[1]); }
MapMatrix weight_grad(Parameter& p) { return MapMatrix(p.grad.data(), p.shape[0], p.shape[1]); }
Eigen::Map<const Eigen::VectorXf> bias(const Parameter& p) {
  return Eigen::Map<const Eigen::VectorXf>(p.value.data(), p.shape[0]);
}
Eigen::Map<Eigen::VectorXf> bias_grad(Parameter& p) { return Eigen::Map<Eigen::VectorXf>(p.grad.data(), p.shape[0]); }

}  // namespace

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
  ConstMapMatrix x(images, 784, n);
  z1_.noalias() = weights(params_[w1_]) * x;
  z1_.colwise() += bias(params_[b1_]);
  a1_ = z1_.cwiseMax(0.0f);
  z2_.noalias() = weights(params_[w2_]) * a1_;
  z2_.colwise() += bias(params_[b2_]);
  a2_ = z2_.cwiseMax(0.0f);
  z3_.noalias() = weights(params_[w3_]) * a2_;
  z3_.colwise() += bias(params_[b3_]);
}

void Mlp::forward(const float* images, int n, float* logits) {
  run_forward(images, n);
  MapMatrix(logits, 10, n) = z3_;
}

float Mlp::forward_backward(const float* images, const int32_t* labels, int n) {
  run_forward(images, n);
  const float loss = layers::softmax_cross_entropy(z3_, labels, dz3_);
  ConstMapMatrix x(images, 784, n);

  weight_grad(params_[w3_]).noalias() = dz3_ * a2_.transpose();
  bias_grad(params_[b3_]) = dz3_.rowwise().sum();
  da2_.noalias() = weights(params_[w3_]).transpose() * dz3_;
  da2_ = (z2_.array() > 0.0f).select(da2_, 0.0f);  // now dz2

  weight_grad(params_[w2_]).noalias() = da2_ * a1_.transpose();
  bias_grad(params_[b2_]) = da2_.rowwise().sum();
  da1_.noalias() = weights(params_[w2_]).transpose() * da2_;
  da1_ = (z1_.array() > 0.0f).select(da1_, 0.0f);  // now dz1

  weight_grad(params_[w1_]).noalias() = da1_ * x.transpose();
  bias_grad(params_[b1_]) = da1_.rowwise().sum();
  return loss;
}

std::unique_ptr<Model> make_mlp(const ModelOptions& options) { return std::make_unique<Mlp>(options); }

}  // namespace muster::runtime::nn
