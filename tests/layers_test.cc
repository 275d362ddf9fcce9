// Layers: im2col against a direct convolution, col2im as im2col's adjoint,
// max pooling and its backward pass.
#include <gtest/gtest.h>

#include <random>

#include "runtime/nn/layers.h"

namespace muster::runtime::nn::layers {
namespace {

Matrix random_matrix(Eigen::Index r, Eigen::Index c, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  Matrix m(r, c);
  for (Eigen::Index i = 0; i < m.size(); ++i) m.data()[i] = u(rng);
  return m;
}

TEST(Im2col, MatchesADirectConvolution) {
  const ConvShape s{3, 6, 5, 3};  // 3 channels, 6x5 image, 3x3 kernel -> 4x3
  const int n = 2, oc = 4;
  Matrix in = random_matrix(s.channels, n * s.height * s.width, 1);
  Matrix w = random_matrix(oc, s.patch(), 2);
  Matrix cols;
  im2col(in.data(), s, n, cols);
  ASSERT_EQ(cols.rows(), s.patch());
  ASSERT_EQ(cols.cols(), n * s.out_height() * s.out_width());
  Matrix out = w * cols;
  for (int img = 0; img < n; ++img)
    for (int y = 0; y < s.out_height(); ++y)
      for (int x = 0; x < s.out_width(); ++x)
        for (int o = 0; o < oc; ++o) {
          double ref = 0.0;
          for (int ky = 0; ky < s.kernel; ++ky)
            for (int kx = 0; kx < s.kernel; ++kx)
              for (int c = 0; c < s.channels; ++c)
                ref += double(w(o, (ky * s.kernel + kx) * s.channels + c)) *
                       in(c, (img * s.height + y + ky) * s.width + x + kx);
          EXPECT_NEAR(out(o, (img * s.out_height() + y) * s.out_width() + x), ref, 1e-5);
        }
}

TEST(Col2im, IsTheAdjointOfIm2col) {
  // <im2col(x), g> == <x, col2im(g)> for any x, g.
  const ConvShape s{2, 7, 7, 5};
  const int n = 3;
  Matrix x = random_matrix(s.channels, n * 49, 3), cols, back;
  im2col(x.data(), s, n, cols);
  Matrix g = random_matrix(cols.rows(), cols.cols(), 4);
  col2im(g, s, n, back);
  EXPECT_NEAR(double(cols.cwiseProduct(g).sum()), double(x.cwiseProduct(back).sum()), 1e-3);
}

TEST(MaxPool, PicksTheMaximumAndRoutesTheGradientBack) {
  const int c = 2, h = 4, w = 4, n = 2;
  Matrix in = random_matrix(c, n * h * w, 5), out, back;
  std::vector<uint8_t> arg;
  maxpool2(in, c, h, w, n, out, arg);
  ASSERT_EQ(out.cols(), n * 4);
  for (int img = 0; img < n; ++img)
    for (int y = 0; y < 2; ++y)
      for (int x = 0; x < 2; ++x)
        for (int ch = 0; ch < c; ++ch) {
          float m = -1e9f;
          for (int dy = 0; dy < 2; ++dy)
            for (int dx = 0; dx < 2; ++dx) m = std::max(m, in(ch, (img * h + 2 * y + dy) * w + 2 * x + dx));
          EXPECT_EQ(out(ch, (img * 2 + y) * 2 + x), m);
        }
  Matrix g = Matrix::Ones(c, n * 4);
  maxpool2_backward(g, arg, c, h, w, n, back);
  EXPECT_FLOAT_EQ(back.sum(), float(c * n * 4));  // one winner per window
  EXPECT_FLOAT_EQ(back.cwiseProduct(in).sum(), out.sum());
}

TEST(SoftmaxCrossEntropy, UniformLogitsGiveLogClasses) {
  Matrix z = Matrix::Zero(10, 4), dz;
  const int32_t labels[4] = {0, 3, 9, 3};
  EXPECT_NEAR(softmax_cross_entropy(z, labels, dz), std::log(10.0), 1e-5);
  EXPECT_NEAR(dz(3, 1), (0.1f - 1.0f) / 4, 1e-6);
  EXPECT_NEAR(dz.sum(), 0.0f, 1e-6);
}

}  // namespace
}  // namespace muster::runtime::nn::layers
