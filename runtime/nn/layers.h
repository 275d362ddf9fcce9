// The building blocks of the models, as free functions over Eigen matrices.
//
// Activations are column-major matrices with one column per (image, pixel):
// a dense layer sees [features x batch]; a convolution sees
// [channels x batch*height*width], column index ((image*H)+y)*W + x, so one
// image's feature map is a contiguous block and flattening is free.
#pragma once

#include <Eigen/Core>
#include <cstdint>
#include <vector>

namespace muster::runtime::nn::layers {

using Matrix = Eigen::MatrixXf;
using MapMatrix = Eigen::Map<Matrix>;
using ConstMapMatrix = Eigen::Map<const Matrix>;

// Mean softmax cross-entropy of `logits` [classes x n]; writes
// d(mean loss)/d(logits) into `dlogits`.
float softmax_cross_entropy(const Matrix& logits, const int32_t* labels, Matrix& dlogits);

// Valid (no padding), stride-1 convolution geometry.
struct ConvShape {
  int channels, height, width, kernel;
  int out_height() const { return height - kernel + 1; }
  int out_width() const { return width - kernel + 1; }
  int patch() const { return kernel * kernel * channels; }
};

// im2col: `in` [C x n*H*W] -> `cols` [K*K*C x n*OH*OW]; a column holds the
// patch under one output pixel, row (ky*K + kx)*C + c.
void im2col(const float* in, const ConvShape& s, int n, Matrix& cols);

// The adjoint of im2col: scatter-adds `cols` back into `in_grad` [C x n*H*W] (zeroed first).
void col2im(const Matrix& cols, const ConvShape& s, int n, Matrix& in_grad);

// 2x2 max pooling, stride 2, on [C x n*H*W]. `argmax` remembers which of the
// four inputs won (0..3) for the backward pass.
void maxpool2(const Matrix& in, int channels, int height, int width, int n, Matrix& out,
              std::vector<uint8_t>& argmax);
void maxpool2_backward(const Eigen::Ref<const Matrix>& out_grad, const std::vector<uint8_t>& argmax, int channels,
                       int height, int width, int n, Matrix& in_grad);

}  // namespace muster::runtime::nn::layers
