#include "muster/runtime/nn/cnn.h"

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

Cnn::Cnn(const ModelOptions& o)
    : c1_(o.conv1), c2_(o.conv2), d_(o.dense), s1_{1, 28, 28, 5}, s2_{o.conv1, 12, 12, 5} {
  params_.reserve(8);
  k1_ = add_parameter("conv1/weight", {c1_, s1_.patch()}, s1_.patch());
  kb1_ = add_parameter("conv1/bias", {c1_}, 0);
  k2_ = add_parameter("conv2/weight", {c2_, s2_.patch()}, s2_.patch());
  kb2_ = add_parameter("conv2/bias", {c2_}, 0);
  w3_ = add_parameter("fc3/weight", {d_, c2_ * 16}, c2_ * 16);
  b3_ = add_parameter("fc3/bias", {d_}, 0);
  w4_ = add_parameter("fc4/weight", {10, d_}, d_);
  b4_ = add_parameter("fc4/bias", {10}, 0);
}

void Cnn::run_forward(const float* images, int n) {
  layers::im2col(images, s1_, n, cols1_);  // [25 x n*576]
  y1_.noalias() = weights(params_[k1_]) * cols1_;
  y1_.colwise() += bias(params_[kb1_]);
  y1_ = y1_.cwiseMax(0.0f);
  layers::maxpool2(y1_, c1_, 24, 24, n, p1_, arg1_);  // [c1 x n*144]

  layers::im2col(p1_.data(), s2_, n, cols2_);  // [25*c1 x n*64]
  y2_.noalias() = weights(params_[k2_]) * cols2_;
  y2_.colwise() += bias(params_[kb2_]);
  y2_ = y2_.cwiseMax(0.0f);
  layers::maxpool2(y2_, c2_, 8, 8, n, p2_, arg2_);  // [c2 x n*16] == [c2*16 x n]

  ConstMapMatrix flat(p2_.data(), c2_ * 16, n);
  z3_.noalias() = weights(params_[w3_]) * flat;
  z3_.colwise() += bias(params_[b3_]);
  a3_ = z3_.cwiseMax(0.0f);
  z4_.noalias() = weights(params_[w4_]) * a3_;
  z4_.colwise() += bias(params_[b4_]);
}

void Cnn::forward(const float* images, int n, float* logits) {
  run_forward(images, n);
  MapMatrix(logits, 10, n) = z4_;
}

float Cnn::forward_backward(const float* images, const int32_t* labels, int n) {
  run_forward(images, n);
  const float loss = layers::softmax_cross_entropy(z4_, labels, dz4_);

  // Dense layers.
  weight_grad(params_[w4_]).noalias() = dz4_ * a3_.transpose();
  bias_grad(params_[b4_]) = dz4_.rowwise().sum();
  da3_.noalias() = weights(params_[w4_]).transpose() * dz4_;
  da3_ = (z3_.array() > 0.0f).select(da3_, 0.0f);  // now dz3
  ConstMapMatrix flat(p2_.data(), c2_ * 16, n);
  weight_grad(params_[w3_]).noalias() = da3_ * flat.transpose();
  bias_grad(params_[b3_]) = da3_.rowwise().sum();
  dp2_.noalias() = weights(params_[w3_]).transpose() * da3_;  // [c2*16 x n] == [c2 x n*16]

  // conv2: pool, relu, then the two products and col2im.
  layers::maxpool2_backward(ConstMapMatrix(dp2_.data(), c2_, static_cast<Eigen::Index>(n) * 16), arg2_, c2_,
                            8, 8, n, dy2_);
  dy2_ = (y2_.array() > 0.0f).select(dy2_, 0.0f);
  weight_grad(params_[k2_]).noalias() = dy2_ * cols2_.transpose();
  bias_grad(params_[kb2_]) = dy2_.rowwise().sum();
  dcols2_.noalias() = weights(params_[k2_]).transpose() * dy2_;
  layers::col2im(dcols2_, s2_, n, dp1_);

  // conv1: the input needs no gradient.
  layers::maxpool2_backward(dp1_, arg1_, c1_, 24, 24, n, dy1_);
  dy1_ = (y1_.array() > 0.0f).select(dy1_, 0.0f);
  weight_grad(params_[k1_]).noalias() = dy1_ * cols1_.transpose();
  bias_grad(params_[kb1_]) = dy1_.rowwise().sum();
  return loss;
}

std::unique_ptr<Model> make_cnn(const ModelOptions& options) { return std::make_unique<Cnn>(options); }

}  // namespace muster::runtime::nn
