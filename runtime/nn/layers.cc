#include "runtime/nn/layers.h"

#include <cmath>
#include <cstring>

namespace muster::runtime::nn::layers {

float softmax_cross_entropy(const Matrix& logits, const int32_t* labels, Matrix& dlogits) {
  const Eigen::Index n = logits.cols();
  // Shift by each column's maximum so exp never overflows.
  const Eigen::RowVectorXf max = logits.colwise().maxCoeff();
  dlogits = (logits.rowwise() - max).array().exp().matrix();
  const Eigen::RowVectorXf sum = dlogits.colwise().sum();
  double loss = 0.0;
  for (Eigen::Index j = 0; j < n; ++j) {
    const int y = labels[j];
    // -log softmax_y = log(sum) - (z_y - max)
    loss += std::log(static_cast<double>(sum(j))) - (logits(y, j) - max(j));
  }
  // d/dz of the mean loss: (softmax - onehot) / n
  dlogits.array().rowwise() /= (sum.array() * static_cast<float>(n));
  for (Eigen::Index j = 0; j < n; ++j) dlogits(labels[j], j) -= 1.0f / static_cast<float>(n);
  return static_cast<float>(loss / static_cast<double>(n));
}

void im2col(const float* in, const ConvShape& s, int n, Matrix& cols) {
  const int oh = s.out_height(), ow = s.out_width(), kc = s.kernel * s.channels;
  cols.resize(s.patch(), static_cast<Eigen::Index>(n) * oh * ow);
  float* out = cols.data();
  // For a fixed kernel row ky, the K pixels x C channels under the kernel are
  // contiguous in `in`: one copy of K*C floats per kernel row.
  for (int img = 0; img < n; ++img) {
    for (int y = 0; y < oh; ++y) {
      for (int x = 0; x < ow; ++x) {
        for (int ky = 0; ky < s.kernel; ++ky) {
          const float* src = in + ((static_cast<int64_t>(img) * s.height + y + ky) * s.width + x) * s.channels;
          std::memcpy(out, src, sizeof(float) * kc);
          out += kc;
        }
      }
    }
  }
}

void col2im(const Matrix& cols, const ConvShape& s, int n, Matrix& in_grad) {
  const int oh = s.out_height(), ow = s.out_width(), kc = s.kernel * s.channels;
  in_grad.setZero(s.channels, static_cast<Eigen::Index>(n) * s.height * s.width);
  const float* src = cols.data();
  for (int img = 0; img < n; ++img) {
    for (int y = 0; y < oh; ++y) {
      for (int x = 0; x < ow; ++x) {
        for (int ky = 0; ky < s.kernel; ++ky) {
          float* dst = in_grad.data() +
                       ((static_cast<int64_t>(img) * s.height + y + ky) * s.width + x) * s.channels;
          Eigen::Map<Eigen::ArrayXf>(dst, kc) += Eigen::Map<const Eigen::ArrayXf>(src, kc);
          src += kc;
        }
      }
    }
  }
}

void maxpool2(const Matrix& in, int channels, int height, int width, int n, Matrix& out,
              std::vector<uint8_t>& argmax) {
  const int oh = height / 2, ow = width / 2;
  const Eigen::Index outs = static_cast<Eigen::Index>(n) * oh * ow;
  out.resize(channels, outs);
  argmax.resize(static_cast<std::size_t>(channels) * outs);
  Eigen::Index o = 0;
  for (int img = 0; img < n; ++img) {
    for (int y = 0; y < oh; ++y) {
      for (int x = 0; x < ow; ++x, ++o) {
        const Eigen::Index c00 = (static_cast<Eigen::Index>(img) * height + 2 * y) * width + 2 * x;
        const Eigen::Index quad[4] = {c00, c00 + 1, c00 + width, c00 + width + 1};
        uint8_t* arg = argmax.data() + o * channels;
        for (int c = 0; c < channels; ++c) {
          float best = in(c, quad[0]);
          uint8_t k = 0;
          for (uint8_t q = 1; q < 4; ++q) {
            const float v = in(c, quad[q]);
            if (v > best) best = v, k = q;
          }
          out(c, o) = best;
          arg[c] = k;
        }
      }
    }
  }
}

void maxpool2_backward(const Eigen::Ref<const Matrix>& out_grad, const std::vector<uint8_t>& argmax, int channels,
                       int height, int width, int n, Matrix& in_grad) {
  const int oh = height / 2, ow = width / 2;
  in_grad.setZero(channels, static_cast<Eigen::Index>(n) * height * width);
  Eigen::Index o = 0;
  for (int img = 0; img < n; ++img) {
    for (int y = 0; y < oh; ++y) {
      for (int x = 0; x < ow; ++x, ++o) {
        const Eigen::Index c00 = (static_cast<Eigen::Index>(img) * height + 2 * y) * width + 2 * x;
        const Eigen::Index quad[4] = {c00, c00 + 1, c00 + width, c00 + width + 1};
        const uint8_t* arg = argmax.data() + o * channels;
        for (int c = 0; c < channels; ++c) in_grad(c, quad[arg[c]]) = out_grad(c, o);
      }
    }
  }
}

}  // namespace muster::runtime::nn::layers
