// base::write_checkpoint / read_checkpoint: the one checkpoint format. A
// round trip keeps every counter, name and float bit; the bytes are
// little-endian as documented; every kind of damage (any truncation, bad
// magic, another version or kind, trailing bytes, a flipped bit, a length
// the file cannot hold) is refused with a message naming the file and what
// is wrong.
#include "api/base/checkpoint_file.h"

#include <unistd.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <iterator>
#include <limits>
#include <sstream>
#include <vector>

#include <gtest/gtest.h>

#include "temp_dir.h"

namespace muster::base {
namespace {
namespace fs = std::filesystem;

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}
void spit(const fs::path& p, const std::string& bytes) { std::ofstream(p, std::ios::binary | std::ios::trunc) << bytes; }

class CheckpointFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = dir_ / "ckpt.bin";
    contents_.kind = "unit";
    contents_.counters = {{"step", 1234567890123}, {"negative", -7}};
    contents_.tensors = {{"w", w_.data(), w_.size()}, {"empty", nullptr, 0}, {"b", b_.data(), b_.size()}};
    ASSERT_FALSE(write_checkpoint(path_, contents_));
  }
  // Expects a refusal of a damaged file whose message names the file and `what`.
  void expect_damaged(const std::string& what) {
    auto read = read_checkpoint(path_, "unit");
    ASSERT_TRUE(read.failure) << "accepted a file that should say: " << what;
    EXPECT_TRUE(read.damaged) << *read.failure;
    EXPECT_EQ(read.failure->rfind("checkpoint " + path_.string() + ": ", 0), 0u) << *read.failure;
    EXPECT_NE(read.failure->find(what), std::string::npos) << *read.failure;
    EXPECT_TRUE(read.checkpoint.tensors.empty());
  }

  muster::testing::TempDir dir_{"muster-base-ckpt"};
  fs::path path_;
  std::vector<float> w_ = {1.0f, -0.0f, std::numeric_limits<float>::infinity(), 3.25e-38f, 1e-45f /* denormal */};
  std::vector<float> b_ = {std::numeric_limits<float>::quiet_NaN(), 42.5f};
  CheckpointContents contents_;
};

TEST_F(CheckpointFileTest, RoundTripKeepsCountersNamesAndEveryBit) {
  auto read = read_checkpoint(path_, "unit");
  ASSERT_FALSE(read.failure) << *read.failure;
  const Checkpoint& c = read.checkpoint;
  EXPECT_EQ(c.kind, "unit");
  EXPECT_EQ(c.counters, contents_.counters);
  EXPECT_EQ(c.counter("step"), 1234567890123);
  EXPECT_EQ(c.counter("negative"), -7);
  EXPECT_FALSE(c.counter("missing").has_value());
  ASSERT_EQ(c.tensors.size(), 3u);
  EXPECT_EQ(c.tensors[0].name, "w");
  EXPECT_EQ(c.tensors[1].name, "empty");
  EXPECT_TRUE(c.tensors[1].values.empty());
  EXPECT_EQ(c.tensors[2].name, "b");
  ASSERT_EQ(c.tensors[0].values.size(), w_.size());
  EXPECT_EQ(std::memcmp(c.tensors[0].values.data(), w_.data(), w_.size() * 4), 0);
  ASSERT_EQ(c.tensors[2].values.size(), b_.size());
  EXPECT_EQ(std::memcmp(c.tensors[2].values.data(), b_.data(), b_.size() * 4), 0);  // NaN's bits too
  EXPECT_TRUE(std::signbit(c.tensors[0].values[1]));
}

TEST_F(CheckpointFileTest, BytesAreLittleEndianAsDocumented) {
  const std::string bytes = slurp(path_);
  ASSERT_GE(bytes.size(), 24u);
  EXPECT_EQ(bytes.substr(0, 8), "MUSTERCK");
  EXPECT_EQ(bytes.substr(8, 4), std::string("\x02\x00\x00\x00", 4));  // version 2
  uint64_t body = 0;
  for (int i = 0; i < 8; ++i) body |= uint64_t{static_cast<unsigned char>(bytes[12 + i])} << (8 * i);
  EXPECT_EQ(body, bytes.size() - 24);  // header 20, trailer 4
  EXPECT_EQ(bytes.substr(20, 8), std::string("\x04\x00\x00\x00unit", 8));  // the kind, length first
  // "step" = 1234567890123 = 0x0000011F71FB04CB, low byte first.
  EXPECT_NE(bytes.find(std::string("step\xcb\x04\xfb\x71\x1f\x01\x00\x00", 12)), std::string::npos);
  // Tensor "w": 5 elements, then 1.0f = 0x3f800000 as 00 00 80 3f.
  EXPECT_NE(bytes.find(std::string("w\x05\x00\x00\x00\x00\x00\x00\x00\x00\x00\x80\x3f", 13)), std::string::npos);
}

TEST_F(CheckpointFileTest, EveryTruncationIsRefused) {
  const std::string bytes = slurp(path_);
  for (std::size_t n = 0; n < bytes.size(); ++n) {
    spit(path_, bytes.substr(0, n));
    SCOPED_TRACE("cut to " + std::to_string(n) + " bytes");
    expect_damaged("truncated");
  }
}

TEST_F(CheckpointFileTest, BadMagicVersionKindAndTrailingBytesAreNamed) {
  const std::string good = slurp(path_);
  std::string bad = good;
  bad[0] = 'X';
  spit(path_, bad);
  expect_damaged("bad magic (not a muster checkpoint)");

  bad = good;
  bad[8] = 3;
  spit(path_, bad);
  expect_damaged("unsupported version 3; this build reads version 2");

  bad = good;
  bad[8] = 1;
  spit(path_, bad);
  expect_damaged("version 1 (written by an earlier muster");

  bad = good + "x";
  spit(path_, bad);
  expect_damaged("size mismatch: the file has " + std::to_string(bad.size()) + " bytes, its header promises " +
                 std::to_string(good.size()));

  spit(path_, good);
  auto other = read_checkpoint(path_, "ps");
  ASSERT_TRUE(other.failure);
  EXPECT_TRUE(other.damaged);
  EXPECT_NE(other.failure->find("written by 'unit', not a 'ps' checkpoint"), std::string::npos) << *other.failure;
}

TEST_F(CheckpointFileTest, AFlippedBitFailsTheChecksum) {
  std::string bytes = slurp(path_);
  bytes[bytes.size() - 8] ^= 0x01;  // inside b's last float
  spit(path_, bytes);
  expect_damaged("checksum mismatch");
}

TEST_F(CheckpointFileTest, LengthsTheFileCannotHoldAreRefusedBeforeAllocating) {
  std::string bytes = slurp(path_);
  // Tensor "w" claims 2^40 elements: more than the body holds.
  const auto at = bytes.find(std::string("w\x05\x00\x00\x00\x00\x00\x00\x00", 9));
  ASSERT_NE(at, std::string::npos);
  bytes[at + 6] = 0x01;
  spit(path_, bytes);
  expect_damaged("size mismatch: tensor 'w' declares 1099511627781 floats");
  // A header promising an enormous body.
  bytes = slurp(path_);
  for (int i = 12; i < 20; ++i) bytes[i] = '\xff';
  spit(path_, bytes);
  expect_damaged("truncated: the file has");
}

TEST_F(CheckpointFileTest, AMissingFileIsAnIoErrorNotDamage) {
  auto read = read_checkpoint(dir_ / "nothing.bin", "unit");
  ASSERT_TRUE(read.failure);
  EXPECT_FALSE(read.damaged);
  EXPECT_NE(read.failure->find("nothing.bin: cannot open"), std::string::npos) << *read.failure;
}

TEST_F(CheckpointFileTest, WriterRefusesWhatItCouldNotReadBack) {
  CheckpointContents c;
  c.kind = "";
  EXPECT_TRUE(write_checkpoint(dir_ / "x.bin", c));
  c.kind = "unit";
  c.tensors = {{std::string(kMaxCheckpointName + 1, 'n'), w_.data(), w_.size()}};
  EXPECT_TRUE(write_checkpoint(dir_ / "x.bin", c));
  c.tensors = {{"null", nullptr, 3}};
  EXPECT_TRUE(write_checkpoint(dir_ / "x.bin", c));
  EXPECT_FALSE(fs::exists(dir_ / "x.bin"));
  // And the previous file survives a failed write (AtomicFile).
  const std::string before = slurp(path_);
  fs::permissions(dir_.path(), fs::perms::owner_read | fs::perms::owner_exec);
  if (::geteuid() != 0) {
    EXPECT_TRUE(write_checkpoint(path_, contents_));  // root writes anyway
  }
  fs::permissions(dir_.path(), fs::perms::owner_all);
  EXPECT_EQ(slurp(path_), before);
}

}  // namespace
}  // namespace muster::base
