#include "runtime/data/dataset.h"

#include <algorithm>
#include <cstring>
#include <sys/stat.h>

#include "runtime/data/idx_reader.h"
#include "runtime/error.h"

namespace muster::runtime::data {
namespace {

bool exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

// Prefers the gzip file, falls back to an uncompressed one.
std::string locate(const std::string& dir, const std::string& base) {
  const std::string gz = dir + "/" + base + ".gz";
  if (exists(gz)) return gz;
  if (exists(dir + "/" + base)) return dir + "/" + base;
  return gz;  // read_idx reports it missing, by the name users expect
}

}  // namespace

void Dataset::gather(const int64_t* indices, int64_t n, float* images_out, int32_t* labels_out) const {
  const int64_t px = pixels();
  for (int64_t i = 0; i < n; ++i) {
    const int64_t k = indices[i];
    if (k < 0 || k >= count) {
      throw InvalidArgument("dataset: index " + std::to_string(k) + " out of range [0, " +
                            std::to_string(count) + ")");
    }
    std::memcpy(images_out + i * px, image(k), sizeof(float) * px);
    labels_out[i] = labels[k];
  }
}

Dataset Dataset::head(int64_t n) const {
  if (n <= 0 || n >= count) return *this;
  Dataset d;
  d.count = n;
  d.rows = rows;
  d.cols = cols;
  d.classes = classes;
  d.images.assign(images.begin(), images.begin() + n * pixels());
  d.labels.assign(labels.begin(), labels.begin() + n);
  return d;
}

Dataset load_idx_pair(const std::string& images_path, const std::string& labels_path) {
  const IdxArray im = read_idx(images_path, 3);
  const IdxArray lb = read_idx(labels_path, 1);
  if (im.dims[0] != lb.dims[0]) {
    throw DataError("mismatched counts: " + images_path + " has " + std::to_string(im.dims[0]) +
                    " images but " + labels_path + " has " + std::to_string(lb.dims[0]) + " labels");
  }
  Dataset d;
  d.count = im.dims[0];
  d.rows = static_cast<int>(im.dims[1]);
  d.cols = static_cast<int>(im.dims[2]);
  d.images.resize(im.values.size());
  std::transform(im.values.begin(), im.values.end(), d.images.begin(),
                 [](uint8_t v) { return static_cast<float>(v) * (1.0f / 255.0f); });
  d.labels.assign(lb.values.begin(), lb.values.end());
  d.classes = 1 + *std::max_element(d.labels.begin(), d.labels.end());
  return d;
}

Dataset load_mnist(const std::string& dir, const std::string& split) {
  std::string s = split == "test" ? "t10k" : split;
  if (s != "train" && s != "t10k") {
    throw InvalidArgument("dataset: split must be train or t10k/test, got '" + split + "'");
  }
  return load_idx_pair(locate(dir, s + "-images-idx3-ubyte"), locate(dir, s + "-labels-idx1-ubyte"));
}

}  // namespace muster::runtime::data
