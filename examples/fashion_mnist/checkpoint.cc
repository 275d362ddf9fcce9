#include "examples/fashion_mnist/checkpoint.h"

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <vector>

#include "api/base/atomic_file.h"
#include "runtime/error.h"

namespace muster::examples::fashion_mnist {
namespace {

constexpr char kMagic[8] = {'M', 'F', 'M', 'N', 'C', 'K', 'P', '1'};

struct Buffer {
  std::string name;
  float* data;
  std::size_t size;
};

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

template <typename T>
void put(base::AtomicFile& f, const T& v) {
  f.write(&v, sizeof v);
}
template <typename T>
T get(std::ifstream& f, const std::string& path) {
  T v{};
  if (!f.read(reinterpret_cast<char*>(&v), sizeof v)) throw runtime::DataError(path + ": checkpoint truncated");
  return v;
}

}  // namespace

std::string checkpoint_path(const std::string& dir) { return dir + "/fashion_mnist.ckpt"; }

void save_checkpoint(const std::string& dir, int64_t steps, const runtime::nn::Model& model,
                     runtime::optim::Optimizer& optimizer) {
  std::filesystem::create_directories(dir);
  const std::string path = checkpoint_path(dir);
  {
    base::AtomicFile f(path);
    f.write(kMagic, sizeof kMagic);
    put(f, steps);
    put(f, optimizer.iterations());
    auto bufs = buffers(const_cast<runtime::nn::Model&>(model), optimizer);
    put(f, static_cast<uint32_t>(bufs.size()));
    for (const auto& b : bufs) {
      put(f, static_cast<uint32_t>(b.name.size()));
      f.write(b.name.data(), b.name.size());
      put(f, static_cast<uint64_t>(b.size));
      f.write(b.data, b.size * sizeof(float));
    }
    if (auto err = f.commit()) throw runtime::Error("cannot write the checkpoint: " + *err);
  }
}

std::optional<int64_t> load_checkpoint(const std::string& dir, runtime::nn::Model& model,
                                       runtime::optim::Optimizer& optimizer) {
  const std::string path = checkpoint_path(dir);
  std::ifstream f(path, std::ios::binary);
  if (!f) return std::nullopt;
  char magic[8];
  if (!f.read(magic, sizeof magic) || std::memcmp(magic, kMagic, sizeof magic) != 0) {
    throw runtime::DataError(path + ": not a fashion_mnist checkpoint (wrong magic)");
  }
  const auto steps = get<int64_t>(f, path);
  const auto iterations = get<int64_t>(f, path);
  auto bufs = buffers(model, optimizer);
  const auto n = get<uint32_t>(f, path);
  if (n != bufs.size()) {
    throw runtime::DataError(path + ": holds " + std::to_string(n) + " buffers, model " + model.name() + " with " +
                             optimizer.name() + " needs " + std::to_string(bufs.size()) +
                             " (another --model or --optimizer?)");
  }
  for (const auto& b : bufs) {
    const auto len = get<uint32_t>(f, path);
    std::string name(len, '\0');
    f.read(name.data(), len);
    const auto size = get<uint64_t>(f, path);
    if (name != b.name || size != b.size) {
      throw runtime::DataError(path + ": buffer '" + name + "' (" + std::to_string(size) + ") where '" + b.name +
                               "' (" + std::to_string(b.size) + ") was expected");
    }
    if (!f.read(reinterpret_cast<char*>(b.data), static_cast<std::streamsize>(size * sizeof(float)))) {
      throw runtime::DataError(path + ": checkpoint truncated in '" + name + "'");
    }
  }
  optimizer.set_iterations(iterations);
  return steps;
}

}  // namespace muster::examples::fashion_mnist
