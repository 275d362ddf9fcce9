#include "examples/fashion_mnist/checkpoint.h"

#include <algorithm>
#include <filesystem>
#include <vector>

#include "api/base/checkpoint_file.h"
#include "runtime/error.h"

namespace muster::examples::fashion_mnist {
namespace {

constexpr char kKind[] = "fashion_mnist";
constexpr char kSteps[] = "steps";
constexpr char kIterations[] = "optimizer_iterations";

struct Buffer {
  std::string name;
  float* data;
  std::size_t size;
};

// The model's parameters, then the optimizer's state (initialised for the
// model's sizes if it was not yet): what a checkpoint holds, in its order.
std::vector<Buffer> buffers(runtime::nn::Model& model, runtime::optim::Optimizer& optimizer) {
  std::vector<Buffer> out;
  std::vector<std::size_t> sizes;
  for (auto& p : model.parameters()) {
    out.push_back({p.name, p.value.data(), p.size()});
    sizes.push_back(p.size());
  }
  if (optimizer.state().empty()) optimizer.init(sizes);
  for (auto& s : optimizer.state()) out.push_back({"optimizer/" + s.name, s.data, s.size});
  return out;
}

}  // namespace

std::string checkpoint_path(const std::string& dir) { return dir + "/fashion_mnist.ckpt"; }

void save_checkpoint(const std::string& dir, int64_t steps, const runtime::nn::Model& model,
                     runtime::optim::Optimizer& optimizer) {
  std::filesystem::create_directories(dir);
  base::CheckpointContents contents{kKind, {{kSteps, steps}, {kIterations, optimizer.iterations()}}, {}};
  for (const auto& b : buffers(const_cast<runtime::nn::Model&>(model), optimizer)) {
    contents.tensors.push_back({b.name, b.data, b.size});
  }
  if (auto err = base::write_checkpoint(checkpoint_path(dir), contents)) {
    throw runtime::Error("cannot write the checkpoint: " + *err);
  }
}

std::optional<int64_t> load_checkpoint(const std::string& dir, runtime::nn::Model& model,
                                       runtime::optim::Optimizer& optimizer) {
  const std::string path = checkpoint_path(dir);
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return std::nullopt;
  auto read = base::read_checkpoint(path, kKind);
  if (read.failure) {
    if (read.damaged) throw runtime::DataError(*read.failure);
    throw runtime::Error(*read.failure);
  }
  const base::Checkpoint& c = read.checkpoint;
  const auto steps = c.counter(kSteps);
  const auto iterations = c.counter(kIterations);
  if (!steps || !iterations) {
    throw runtime::DataError(path + ": no '" + std::string(steps ? kIterations : kSteps) + "' counter");
  }
  auto bufs = buffers(model, optimizer);
  if (c.tensors.size() != bufs.size()) {
    throw runtime::DataError(path + ": holds " + std::to_string(c.tensors.size()) + " buffers, model " + model.name() +
                             " with " + optimizer.name() + " needs " + std::to_string(bufs.size()) +
                             " (another --model or --optimizer?)");
  }
  // Check every buffer before touching the model, so a refused checkpoint
  // leaves it as it was.
  for (std::size_t i = 0; i < bufs.size(); ++i) {
    const auto& t = c.tensors[i];
    if (t.name != bufs[i].name || t.values.size() != bufs[i].size) {
      throw runtime::DataError(path + ": buffer '" + t.name + "' (" + std::to_string(t.values.size()) + ") where '" +
                               bufs[i].name + "' (" + std::to_string(bufs[i].size) + ") was expected");
    }
  }
  for (std::size_t i = 0; i < bufs.size(); ++i) {
    std::copy(c.tensors[i].values.begin(), c.tensors[i].values.end(), bufs[i].data);
  }
  optimizer.set_iterations(*iterations);
  return *steps;
}

}  // namespace muster::examples::fashion_mnist
