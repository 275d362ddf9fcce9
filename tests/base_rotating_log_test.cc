// base::RotatingLog: no file passes the cap, at most `keep` rotated files
// exist, files end at line ends where lines fit, and every byte written is
// either on disk, in order, or counted as dropped; the marker lines give
// absolute offsets a reader can rely on (describe_log).
#include "api/base/rotating_log.h"

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "temp_dir.h"

namespace muster::base {
namespace {
namespace fs = std::filesystem;

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string numbered(int i) {
  std::string line = "line " + std::to_string(i) + " ";
  line.resize(60, 'x');
  return line + "\n";
}

class RotatingLogTest : public ::testing::Test {
 protected:
  std::unique_ptr<RotatingLog> open(RotatingLogOptions o) {
    std::string error;
    auto log = RotatingLog::open(path_, o, &error);
    EXPECT_TRUE(log) << error;
    return log;
  }
  muster::testing::TempDir tmp_{"muster-base-rotating"};
  fs::path path_ = tmp_.path() / "output.log";
};

TEST_F(RotatingLogTest, UnderTheCapItIsAPlainAppend) {
  auto log = open({1 << 20, 1});
  ASSERT_FALSE(log->write("a\n"));
  ASSERT_FALSE(log->write("b\n"));
  EXPECT_EQ(slurp(path_), "a\nb\n");
  EXPECT_EQ(log->rotations(), 0u);
  EXPECT_FALSE(fs::exists(rotated_path(path_, 1)));
  const LogFileInfo info = describe_log(path_);
  EXPECT_EQ(info.size, 4u);
  EXPECT_EQ(info.base_offset, 0u);
  EXPECT_EQ(info.marker_length, 0u);
  EXPECT_TRUE(info.rotated.empty());
}

TEST_F(RotatingLogTest, RotatesAtLineEndsKeepsKFilesAndAccountsForEveryByte) {
  RotatingLogOptions o{4096, 2};
  auto log = open(o);
  uint64_t written = 0;
  std::string chunk;
  const int kLines = 2000;
  for (int i = 0; i < kLines; ++i) {
    chunk += numbered(i);
    if (chunk.size() > 700 || i == kLines - 1) {  // writes that straddle the cap
      ASSERT_FALSE(log->write(chunk));
      written += chunk.size();
      chunk.clear();
    }
  }
  ASSERT_TRUE(fs::exists(rotated_path(path_, 2)));
  EXPECT_FALSE(fs::exists(rotated_path(path_, 3)));
  // Newest last: path.2, path.1, path.
  std::vector<fs::path> files = {rotated_path(path_, 2), rotated_path(path_, 1), path_};
  uint64_t on_disk = 0, markers = 0;
  std::string data;  // the written bytes that are still on disk, in order
  uint64_t expected_base = 0;
  for (size_t k = 0; k < files.size(); ++k) {
    const std::string text = slurp(files[k]);
    EXPECT_LE(text.size(), o.max_bytes) << files[k];
    EXPECT_EQ(text.back(), '\n') << files[k] << " ends mid-line";
    auto m = parse_rotation_marker(text);
    ASSERT_TRUE(m) << files[k] << " does not start with a rotation line: " << text.substr(0, 80);
    if (k > 0) {
      EXPECT_EQ(m->base_offset, expected_base) << "offsets are contiguous across " << files[k];
    }
    expected_base = m->base_offset + text.size();
    markers += m->length;
    on_disk += text.size();
    data += text.substr(m->length);
  }
  const LogFileInfo info = describe_log(path_);
  EXPECT_EQ(info.base_offset + info.size, log->base_offset() + log->file_bytes());
  EXPECT_EQ(info.dropped, log->dropped_bytes());
  ASSERT_EQ(info.rotated.size(), 2u);
  EXPECT_EQ(info.rotated[0], rotated_path(path_, 1));
  // Everything written (plus every rotation line) is on disk or dropped.
  const uint64_t all_markers = log->base_offset() + log->file_bytes() - written;
  EXPECT_EQ(info.dropped + on_disk, written + all_markers);
  EXPECT_GE(all_markers, markers);
  // What is on disk is the end of what was written, whole lines, in order.
  std::string tail;
  for (int i = kLines - 1; i >= 0 && tail.size() < data.size(); --i) tail = numbered(i) + tail;
  EXPECT_EQ(data, tail);
}

TEST_F(RotatingLogTest, KeepZeroDropsTheOldFile) {
  auto log = open({4096, 0});
  std::string text;
  for (int i = 0; i < 200; ++i) text += numbered(i);
  ASSERT_FALSE(log->write(text));
  EXPECT_FALSE(fs::exists(rotated_path(path_, 1)));
  const LogFileInfo info = describe_log(path_);
  EXPECT_LE(info.size, 4096u);
  EXPECT_GT(info.dropped, 0u);
  EXPECT_EQ(info.base_offset, info.dropped);  // everything before this file was dropped
}

TEST_F(RotatingLogTest, ALineLongerThanTheCapIsCutAtTheCap) {
  auto log = open({4096, 3});
  ASSERT_FALSE(log->write(std::string(10000, 'z')));
  for (const auto& p : {rotated_path(path_, 2), rotated_path(path_, 1), path_}) {
    EXPECT_LE(fs::file_size(p), 4096u) << p;
  }
  EXPECT_EQ(fs::file_size(rotated_path(path_, 2)), 4096u);  // the first file was filled to the cap
}

TEST_F(RotatingLogTest, AReopenedLogContinuesItsOffsetsAndCap) {
  {
    auto log = open({4096, 1});
    std::string text;
    for (int i = 0; i < 100; ++i) text += numbered(i);
    ASSERT_FALSE(log->write(text));
  }
  const LogFileInfo before = describe_log(path_);
  auto log = open({4096, 1});
  EXPECT_EQ(log->base_offset(), before.base_offset);
  EXPECT_EQ(log->file_bytes(), before.size);
  EXPECT_EQ(log->dropped_bytes(), before.dropped);
  ASSERT_FALSE(log->write(std::string(4096, 'q')));
  EXPECT_LE(fs::file_size(path_), 4096u);
  // A write without a line end fills the continued file to the cap, then rotates.
  EXPECT_EQ(fs::file_size(rotated_path(path_, 1)), 4096u);
  EXPECT_EQ(describe_log(path_).base_offset, before.base_offset + 4096u);
}

TEST_F(RotatingLogTest, MarkersRoundTripAndOrdinaryLinesAreNotMarkers) {
  const std::string line = rotation_marker(123456789, 4242, "/s/workers/w1/output.log", {1 << 20, 2});
  EXPECT_EQ(line.back(), '\n');
  EXPECT_NE(line.find("output.log.1"), std::string::npos) << line;
  auto m = parse_rotation_marker(line + "next line\n");
  ASSERT_TRUE(m);
  EXPECT_EQ(m->base_offset, 123456789u);
  EXPECT_EQ(m->dropped, 4242u);
  EXPECT_EQ(m->length, line.size());
  EXPECT_FALSE(parse_rotation_marker("[muster] log rotated: no numbers\n"));
  EXPECT_FALSE(parse_rotation_marker("hello\n"));
  EXPECT_FALSE(parse_rotation_marker(line.substr(0, line.size() - 1)));  // no line end yet
}

TEST_F(RotatingLogTest, OptionsAreChecked) {
  EXPECT_TRUE(validate({100, 1}));
  EXPECT_TRUE(validate({1 << 20, kMaxLogKeep + 1}));
  EXPECT_FALSE(validate({kMinLogBytes, 0}));
  std::string error;
  EXPECT_FALSE(RotatingLog::open(path_, {10, 1}, &error));
  EXPECT_NE(error.find("max_bytes"), std::string::npos) << error;
  EXPECT_FALSE(RotatingLog::open(tmp_.path() / "missing" / "x.log", {4096, 1}, &error));
  EXPECT_NE(error.find("missing"), std::string::npos) << error;
}

}  // namespace
}  // namespace muster::base
