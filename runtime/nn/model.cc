#include "runtime/nn/model.h"

#include <Eigen/Core>
#include <algorithm>
#include <numeric>
#include <random>

#include "runtime/error.h"
#include "runtime/nn/cnn.h"
#include "runtime/nn/mlp.h"

namespace muster::runtime::nn {

void GradientBuffer::borrow(float* memory) {
  if (size_ > 0 && memory == nullptr) throw InvalidArgument("GradientBuffer::borrow: null memory");
  if (memory == data_) return;
  std::copy(data_, data_ + size_, memory);
  data_ = memory;
  std::vector<float>().swap(own_);
}

std::size_t Model::add_parameter(const std::string& name, std::vector<int> shape, int fan_in) {
  const std::size_t size =
      std::accumulate(shape.begin(), shape.end(), std::size_t{1}, [](std::size_t a, int b) { return a * b; });
  Parameter p;
  p.name = name;
  p.shape = std::move(shape);
  p.value.assign(size, 0.0f);
  p.grad.allocate(size);
  p.fan_in = fan_in;
  params_.push_back(std::move(p));  // moving keeps each buffer's address
  return params_.size() - 1;
}

void Model::initialize(uint64_t seed) {
  std::mt19937_64 rng(seed);
  for (auto& p : params_) {
    if (p.fan_in == 0) {
      std::fill(p.value.begin(), p.value.end(), 0.0f);
      continue;
    }
    std::normal_distribution<float> normal(0.0f, std::sqrt(2.0f / static_cast<float>(p.fan_in)));
    for (float& v : p.value) v = normal(rng);
  }
}

std::size_t Model::parameter_count() const {
  std::size_t n = 0;
  for (const auto& p : params_) n += p.size();
  return n;
}

int64_t Model::count_correct(const float* images, const int32_t* labels, int64_t n, int batch) {
  std::vector<float> logits(static_cast<std::size_t>(batch) * classes());
  int64_t correct = 0;
  for (int64_t start = 0; start < n; start += batch) {
    const int m = static_cast<int>(std::min<int64_t>(batch, n - start));
    forward(images + start * input_size(), m, logits.data());
    Eigen::Map<const Eigen::MatrixXf> z(logits.data(), classes(), m);
    for (int j = 0; j < m; ++j) {
      Eigen::Index arg;
      z.col(j).maxCoeff(&arg);
      if (arg == labels[start + j]) ++correct;
    }
  }
  return correct;
}

std::unique_ptr<Model> make_model(const std::string& name, const ModelOptions& options) {
  if (name == "mlp") return make_mlp(options);
  if (name == "cnn") return make_cnn(options);
  throw InvalidArgument("model must be 'mlp' or 'cnn', got '" + name + "'");
}

}  // namespace muster::runtime::nn
