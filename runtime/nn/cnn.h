// Cnn: a LeNet-style network for 28x28 grey images.
//
//   conv1 5x5, 1 -> C1 channels (valid) 24x24, relu, maxpool 2 -> 12x12
//   conv2 5x5, C1 -> C2 channels (valid) 8x8,  relu, maxpool 2 -> 4x4
//   flatten (C2*16) -> dense D, relu -> dense 10, softmax cross-entropy
//
// A convolution is im2col followed by one matrix product (W [Cout x K*K*Cin]
// times the patch matrix); its backward pass is two products plus col2im.
#pragma once

#include <Eigen/Core>
#include <cstdint>
#include <vector>

#include "runtime/nn/layers.h"
#include "runtime/nn/model.h"

namespace muster::runtime::nn {

class Cnn final : public Model {
 public:
  explicit Cnn(const ModelOptions& options);
  std::string name() const override { return "cnn"; }
  int input_size() const override { return 784; }
  int classes() const override { return 10; }
  void forward(const float* images, int n, float* logits) override;
  float forward_backward(const float* images, const int32_t* labels, int n) override;

 private:
  void run_forward(const float* images, int n);
  int c1_, c2_, d_;
  layers::ConvShape s1_, s2_;
  std::size_t k1_, kb1_, k2_, kb2_, w3_, b3_, w4_, b4_;
  Eigen::MatrixXf cols1_, y1_, p1_, cols2_, y2_, p2_, z3_, a3_, z4_;
  Eigen::MatrixXf dz4_, da3_, dp2_, dy2_, dcols2_, dp1_, dy1_;
  std::vector<uint8_t> arg1_, arg2_;
};

std::unique_ptr<Model> make_cnn(const ModelOptions& options);

}  // namespace muster::runtime::nn
