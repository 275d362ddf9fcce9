// IDX reader and data set loading: good files (plain and gzip), every corrupt
// case with an error naming the file, and the real Fashion-MNIST when installed.
#include <gtest/gtest.h>
#include <zlib.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "runtime/data/dataset.h"
#include "runtime/data/idx_reader.h"
#include "runtime/error.h"
#include "temp_dir.h"

namespace muster::runtime::data {
namespace {

namespace fs = std::filesystem;

std::vector<uint8_t> header(uint8_t type, std::vector<uint32_t> dims) {
  std::vector<uint8_t> h{0, 0, type, static_cast<uint8_t>(dims.size())};
  for (uint32_t d : dims) {
    h.push_back(uint8_t(d >> 24)), h.push_back(uint8_t(d >> 16)), h.push_back(uint8_t(d >> 8)), h.push_back(uint8_t(d));
  }
  return h;
}

class IdxTest : public ::testing::Test {
 protected:

  std::string write(const std::string& name, const std::vector<uint8_t>& bytes, bool gzip = false) {
    const std::string path = dir_ + "/" + name;
    if (gzip) {
      gzFile f = gzopen(path.c_str(), "wb");
      gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size()));
      gzclose(f);
    } else {
      FILE* f = std::fopen(path.c_str(), "wb");
      std::fwrite(bytes.data(), 1, bytes.size(), f);
      std::fclose(f);
    }
    return path;
  }

  // n images of 2x3 pixels with value i*10+p, and labels i % 10.
  std::pair<std::string, std::string> write_pair(uint32_t n_images, uint32_t n_labels, bool gzip) {
    auto im = header(0x08, {n_images, 2, 3});
    for (uint32_t i = 0; i < n_images; ++i)
      for (uint8_t p = 0; p < 6; ++p) im.push_back(uint8_t(i * 10 + p));
    auto lb = header(0x08, {n_labels});
    for (uint32_t i = 0; i < n_labels; ++i) lb.push_back(uint8_t(i % 10));
    const std::string ext = gzip ? ".gz" : "";
    return {write("images" + ext, im, gzip), write("labels" + ext, lb, gzip)};
  }

  // Expects a DataError whose message contains the path and `what`.
  template <typename F>
  void expect_error(F f, const std::string& path, const std::string& what) {
    try {
      f();
      FAIL() << "expected DataError mentioning " << what;
    } catch (const DataError& e) {
      EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  }

  muster::testing::TempDir tmp_{"muster-idx-test"};
  std::string dir_ = tmp_.str();
};

TEST_F(IdxTest, ReadsPlainAndGzipFiles) {
  for (bool gzip : {false, true}) {
    auto [im, lb] = write_pair(4, 4, gzip);
    Dataset d = load_idx_pair(im, lb);
    EXPECT_EQ(d.count, 4);
    EXPECT_EQ(d.rows, 2);
    EXPECT_EQ(d.cols, 3);
    EXPECT_EQ(d.classes, 4);
    ASSERT_EQ(d.images.size(), 24u);
    EXPECT_FLOAT_EQ(d.images[0], 0.0f);
    EXPECT_FLOAT_EQ(d.image(3)[5], 35.0f / 255.0f);
    EXPECT_EQ(d.labels[3], 3);

    const int64_t idx[2] = {3, 1};
    std::vector<float> batch(12);
    int32_t labels[2];
    d.gather(idx, 2, batch.data(), labels);
    EXPECT_FLOAT_EQ(batch[0], 30.0f / 255.0f);
    EXPECT_FLOAT_EQ(batch[6], 10.0f / 255.0f);
    EXPECT_EQ(labels[0], 3);
    EXPECT_EQ(labels[1], 1);
    const int64_t bad[1] = {4};
    EXPECT_THROW(d.gather(bad, 1, batch.data(), labels), InvalidArgument);
    EXPECT_EQ(d.head(2).count, 2);
    EXPECT_EQ(d.head(2).images.size(), 12u);
  }
}

TEST_F(IdxTest, WrongMagic) {
  auto bytes = header(0x08, {2});
  bytes[0] = 0x1f;
  bytes.push_back(1), bytes.push_back(2);
  const auto path = write("magic", bytes);
  expect_error([&] { read_idx(path); }, path, "wrong magic");
}

TEST_F(IdxTest, UnsupportedElementType) {
  auto bytes = header(0x0D, {1});  // float
  bytes.insert(bytes.end(), {0, 0, 0, 0});
  const auto path = write("float", bytes);
  expect_error([&] { read_idx(path); }, path, "element type");
}

TEST_F(IdxTest, TruncatedPlainAndGzip) {
  auto bytes = header(0x08, {10, 2, 2});
  bytes.resize(bytes.size() + 39);  // one byte short of 40
  expect_error([&] { read_idx(write("short", bytes)); }, dir_ + "/short", "truncated");
  const auto gz = write("short.gz", bytes, true);
  expect_error([&] { read_idx(gz); }, gz, "truncated");

  // A gzip stream cut in the middle: zlib reports it; we name the file.
  std::vector<uint8_t> full = header(0x08, {1000});
  for (int i = 0; i < 1000; ++i) full.push_back(uint8_t(i * 7));
  const auto whole = write("whole.gz", full, true);
  const auto size = fs::file_size(whole);
  fs::resize_file(whole, size / 2);
  expect_error([&] { read_idx(whole); }, whole, "truncated");

  const auto header_only = write("hdr", {0, 0, 8});
  expect_error([&] { read_idx(header_only); }, header_only, "truncated");
}

TEST_F(IdxTest, BadDimensions) {
  auto zero = header(0x08, {0, 28, 28});
  const auto p0 = write("zero", zero);
  expect_error([&] { read_idx(p0); }, p0, "bad dimensions");

  auto labels_as_images = header(0x08, {3});
  labels_as_images.insert(labels_as_images.end(), {1, 2, 3});
  const auto p1 = write("l", labels_as_images);
  expect_error([&] { read_idx(p1, 3); }, p1, "bad dimensions");
  EXPECT_EQ(read_idx(p1, 1).values.size(), 3u);
}

TEST_F(IdxTest, MismatchedImageAndLabelCounts) {
  auto [im, lb] = write_pair(5, 4, true);
  expect_error([&] { load_idx_pair(im, lb); }, im, "mismatched counts");
  expect_error([&] { load_idx_pair(im, lb); }, lb, "mismatched counts");
}

TEST_F(IdxTest, MissingFile) {
  const auto p = dir_ + "/nothing.gz";
  expect_error([&] { read_idx(p); }, p, "cannot open");
  expect_error([&] { load_mnist(dir_, "train"); }, dir_ + "/train-images-idx3-ubyte.gz", "cannot open");
}

TEST(FashionMnist, LoadsTheTestSplitWhenInstalled) {
  const std::string dir = "/usr/share/datasets/fashion-mnist";
  if (!fs::exists(dir + "/t10k-images-idx3-ubyte.gz")) GTEST_SKIP() << "dataset-fashion-mnist not installed";
  Dataset d = load_mnist(dir, "test");
  EXPECT_EQ(d.count, 10000);
  EXPECT_EQ(d.rows, 28);
  EXPECT_EQ(d.cols, 28);
  EXPECT_EQ(d.classes, 10);
  std::vector<int> per_class(10);
  for (int32_t l : d.labels) per_class.at(l)++;
  for (int c : per_class) EXPECT_EQ(c, 1000);  // the test split is balanced
  for (float v : d.images) ASSERT_TRUE(v >= 0.0f && v <= 1.0f);
}

}  // namespace
}  // namespace muster::runtime::data
