// An image-classification data set held in memory: images as float in [0, 1],
// one int32 label per image.
//
// Usage:
//   auto train = muster::runtime::data::load_mnist("/usr/share/datasets/fashion-mnist", "train");
//   train.gather(indices.data(), n, images, labels);   // a batch, row-major
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace muster::runtime::data {

struct Dataset {
  int64_t count = 0;       // number of images
  int rows = 0, cols = 0;  // pixels per image
  int classes = 0;         // 1 + the largest label
  std::vector<float> images;    // count * rows * cols, row-major per image
  std::vector<int32_t> labels;  // count

  int64_t pixels() const { return int64_t(rows) * cols; }
  const float* image(int64_t i) const { return images.data() + i * pixels(); }

  // Copies the images and labels at `indices` into contiguous buffers of
  // n * pixels() floats and n labels. Throws InvalidArgument for an index out of range.
  void gather(const int64_t* indices, int64_t n, float* images_out, int32_t* labels_out) const;

  // The first `n` images (all when n <= 0 or n >= count).
  Dataset head(int64_t n) const;
};

// Reads a pair of IDX files (images: 3 dims, labels: 1 dim). Throws DataError
// naming the files when their counts differ, or a label is out of [0, 255].
Dataset load_idx_pair(const std::string& images_path, const std::string& labels_path);

// MNIST's file names inside `dir`: split "train" or "t10k" (alias "test"),
// `<split>-images-idx3-ubyte[.gz]` and `<split>-labels-idx1-ubyte[.gz]`.
Dataset load_mnist(const std::string& dir, const std::string& split);

}  // namespace muster::runtime::data
