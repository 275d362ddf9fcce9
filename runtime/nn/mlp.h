// Mlp: 784 -> hidden1 -> hidden2 -> 10, ReLU between, softmax cross-entropy.
//
//   forward:  z1 = W1 x + b1, a1 = relu(z1), z2 = W2 a1 + b2, a2 = relu(z2), z3 = W3 a2 + b3
//   backward: dz3 = (softmax(z3) - onehot) / n
//             dW3 = dz3 a2^T, db3 = sum(dz3), da2 = W3^T dz3, dz2 = da2 * [z2 > 0], ... down to W1
// All products are Eigen matrix products over the whole batch.
#pragma once

#include <Eigen/Core>

#include "runtime/nn/model.h"

namespace muster::runtime::nn {

class Mlp final : public Model {
 public:
  explicit Mlp(const ModelOptions& options);
  std::string name() const override { return "mlp"; }
  int input_size() const override { return 784; }
  int classes() const override { return 10; }
  void forward(const float* images, int n, float* logits) override;
  float forward_backward(const float* images, const int32_t* labels, int n) override;

 private:
  void run_forward(const float* images, int n);
  std::size_t w1_, b1_, w2_, b2_, w3_, b3_;
  Eigen::MatrixXf z1_, a1_, z2_, a2_, z3_, dz3_, da2_, da1_;
};

std::unique_ptr<Model> make_mlp(const ModelOptions& options);

}  // namespace muster::runtime::nn
