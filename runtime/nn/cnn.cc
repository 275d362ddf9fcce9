#include "runtime/nn/cnn.h"

#include "runtime/nn/affine.h"

namespace muster::runtime::nn {

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
  affine::forward(params_[k1_], params_[kb1_], cols1_, y1_);
  y1_ = y1_.cwiseMax(0.0f);
  layers::maxpool2(y1_, c1_, 24, 24, n, p1_, arg1_);  // [c1 x n*144]

  layers::im2col(p1_.data(), s2_, n, cols2_);  // [25*c1 x n*64]
  affine::forward(params_[k2_], params_[kb2_], cols2_, y2_);
  y2_ = y2_.cwiseMax(0.0f);
  layers::maxpool2(y2_, c2_, 8, 8, n, p2_, arg2_);  // [c2 x n*16] == [c2*16 x n]

  const layers::ConstMapMatrix flat(p2_.data(), c2_ * 16, n);
  affine::forward(params_[w3_], params_[b3_], flat, z3_);
  a3_ = z3_.cwiseMax(0.0f);
  affine::forward(params_[w4_], params_[b4_], a3_, z4_);
}

void Cnn::forward(const float* images, int n, float* logits) {
  run_forward(images, n);
  layers::MapMatrix(logits, 10, n) = z4_;
}

float Cnn::forward_backward(const float* images, const int32_t* labels, int n) {
  run_forward(images, n);
  const float loss = layers::softmax_cross_entropy(z4_, labels, dz4_);

  // Dense layers.
  affine::gradients(params_[w4_], params_[b4_], dz4_, a3_);
  affine::input_gradient(params_[w4_], dz4_, da3_);
  affine::relu_backward(z3_, da3_);  // now dz3
  const layers::ConstMapMatrix flat(p2_.data(), c2_ * 16, n);
  affine::gradients(params_[w3_], params_[b3_], da3_, flat);
  affine::input_gradient(params_[w3_], da3_, dp2_);  // [c2*16 x n] == [c2 x n*16]

  // conv2: pool, relu, then the two products and col2im.
  layers::maxpool2_backward(layers::ConstMapMatrix(dp2_.data(), c2_, static_cast<Eigen::Index>(n) * 16), arg2_,
                            c2_, 8, 8, n, dy2_);
  affine::relu_backward(y2_, dy2_);
  affine::gradients(params_[k2_], params_[kb2_], dy2_, cols2_);
  affine::input_gradient(params_[k2_], dy2_, dcols2_);
  layers::col2im(dcols2_, s2_, n, dp1_);

  // conv1: the input needs no gradient.
  layers::maxpool2_backward(dp1_, arg1_, c1_, 24, 24, n, dy1_);
  affine::relu_backward(y1_, dy1_);
  affine::gradients(params_[k1_], params_[kb1_], dy1_, cols1_);
  return loss;
}

std::unique_ptr<Model> make_cnn(const ModelOptions& options) { return std::make_unique<Cnn>(options); }

}  // namespace muster::runtime::nn
