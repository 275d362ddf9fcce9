// Model: a classifier with forward and backward passes over a batch.
//
// Parameters and their gradients are named, contiguous float32 buffers owned
// by the model (Parameter::value / Parameter::grad). Their addresses never
// change after construction, so a DistributedOptimizer or a parameter-server
// client can hold pointers to them for the model's lifetime. The list's order
// is fixed by the architecture and identical in every process.
//
// A gradient may instead live in memory lent by its consumer
// (Parameter::grad.borrow): a DistributedOptimizer that owns the gradients
// keeps them back to back, so backprop writes straight into its fusion
// buckets and they are reduced in place, with no packing or unpacking.
//
// Weights are stored column-major with shape {out, in} (dense) or
// {out_channels, kernel*kernel*in_channels} (convolution); biases are {out}.
//
// Usage:
//   auto model = muster::runtime::nn::make_model("mlp");
//   model->initialize(seed);
//   float loss = model->forward_backward(images, labels, n);  // fills grads
//   for (auto& p : model->parameters()) ... p.value, p.grad ...
//
// Not thread-safe: the model keeps its activations between forward and
// backward in member scratch buffers. One model per thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace muster::runtime::nn {

// A gradient's memory: the parameter's own, or borrowed (see above).
class GradientBuffer {
 public:
  void allocate(std::size_t n) {
    own_.assign(n, 0.0f);
    data_ = own_.data();
    size_ = n;
  }
  // Uses `memory` (size() floats, outliving the model's use of it) from now
  // on; the current values are copied there and the own buffer is freed.
  void borrow(float* memory);
  bool borrowed() const { return own_.empty() && size_ > 0; }

  float* data() { return data_; }
  const float* data() const { return data_; }
  std::size_t size() const { return size_; }
  float* begin() { return data_; }
  float* end() { return data_ + size_; }
  const float* begin() const { return data_; }
  const float* end() const { return data_ + size_; }
  float& operator[](std::size_t i) { return data_[i]; }
  float operator[](std::size_t i) const { return data_[i]; }

 private:
  std::vector<float> own_;  // moving a Parameter keeps this buffer's address
  float* data_ = nullptr;
  std::size_t size_ = 0;
};

struct Parameter {
  std::string name;          // e.g. "fc1/weight"
  std::vector<int> shape;
  std::vector<float> value;  // size() floats
  GradientBuffer grad;       // size() floats
  std::size_t size() const { return value.size(); }
  int fan_in = 0;            // 0 for biases (initialised to zero)
};

class Model {
 public:
  virtual ~Model() = default;
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;

  virtual std::string name() const = 0;

  // Input: `n` images of input_size() floats each, contiguous (row-major per image).
  virtual int input_size() const = 0;
  virtual int classes() const = 0;

  // Writes n * classes() logits, image after image.
  virtual void forward(const float* images, int n, float* logits) = 0;

  // Mean softmax cross-entropy over the batch; overwrites every gradient
  // with d(mean loss)/d(parameter). Labels must lie in [0, classes()).
  virtual float forward_backward(const float* images, const int32_t* labels, int n) = 0;

  // He initialisation (normal, stddev sqrt(2 / fan_in)) of the weights from
  // `seed`; biases zero. The same seed gives the same parameters everywhere.
  void initialize(uint64_t seed);

  std::vector<Parameter>& parameters() { return params_; }
  const std::vector<Parameter>& parameters() const { return params_; }
  std::size_t parameter_count() const;

  // Number of correct top-1 predictions, evaluated in chunks of `batch`.
  int64_t count_correct(const float* images, const int32_t* labels, int64_t n, int batch = 500);

 protected:
  Model() = default;
  // Appends a parameter; returns its index (stable for the model's life).
  std::size_t add_parameter(const std::string& name, std::vector<int> shape, int fan_in);

  std::vector<Parameter> params_;
};

struct ModelOptions {
  int hidden1 = 256, hidden2 = 128;  // MLP hidden widths
  int conv1 = 8, conv2 = 16, dense = 128;  // CNN channels and dense width
};

// "mlp" (784-256-128-10) or "cnn" (conv5x5-pool-conv5x5-pool-dense-dense) for
// 28x28 grey images and 10 classes. Throws InvalidArgument for another name.
std::unique_ptr<Model> make_model(const std::string& name, const ModelOptions& options = {});

}  // namespace muster::runtime::nn
