// base::AtomicFile: the content arrives whole with exactly the mode asked
// for, a failed or abandoned write leaves the old file and no temporary.
#include "api/base/atomic_file.h"

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>

#include "temp_dir.h"

namespace muster::base {
namespace {
namespace fs = std::filesystem;

class AtomicFileTest : public ::testing::Test {
 protected:
  static std::string slurp(const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }
  size_t entries() const { return static_cast<size_t>(std::distance(fs::directory_iterator(dir_), {})); }
  muster::testing::TempDir tmp_{"muster-base-atomic"};
  fs::path dir_ = tmp_.path();
};

TEST_F(AtomicFileTest, WritesTheContentWithExactlyTheModeAskedFor) {
  const mode_t old = ::umask(0);  // a permissive umask must not widen a secret
  const auto err = write_file_atomically(dir_ / "token", "secret\n", {0600});
  ::umask(old);
  ASSERT_FALSE(err) << *err;
  EXPECT_EQ(slurp(dir_ / "token"), "secret\n");
  struct stat st {};
  ASSERT_EQ(::stat((dir_ / "token").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  EXPECT_EQ(entries(), 1u) << "a temporary file was left behind";
}

TEST_F(AtomicFileTest, ReplacesAnExistingFileWholeAndStreamsLargeContent) {
  ASSERT_FALSE(write_file_atomically(dir_ / "f", "old"));
  AtomicFile f(dir_ / "f");
  const std::string block(1 << 20, 'x');
  for (int i = 0; i < 8; ++i) f.write(block);
  EXPECT_EQ(slurp(dir_ / "f"), "old") << "the target changed before commit";
  ASSERT_FALSE(f.commit());
  EXPECT_EQ(slurp(dir_ / "f").size(), 8u << 20);
  EXPECT_EQ(entries(), 1u);
}

TEST_F(AtomicFileTest, AnAbandonedWriteLeavesTheOldFileAndNoTemporary) {
  ASSERT_FALSE(write_file_atomically(dir_ / "f", "old"));
  {
    AtomicFile f(dir_ / "f");
    f.write("new");
  }
  EXPECT_EQ(slurp(dir_ / "f"), "old");
  EXPECT_EQ(entries(), 1u);
}

TEST_F(AtomicFileTest, AFailureNamesThePathAndTheReason) {
  const auto err = write_file_atomically(dir_ / "missing" / "f", "x");
  ASSERT_TRUE(err);
  EXPECT_NE(err->find((dir_ / "missing").string()), std::string::npos) << *err;
  EXPECT_NE(err->find("No such file"), std::string::npos) << *err;
  if (::geteuid() != 0) {  // root writes into read-only directories anyway
    fs::permissions(dir_, fs::perms::owner_read | fs::perms::owner_exec);
    EXPECT_TRUE(write_file_atomically(dir_ / "f", "x"));
  }
}

TEST_F(AtomicFileTest, CommitTwiceIsAnError) {
  AtomicFile f(dir_ / "f");
  f.write("a");
  ASSERT_FALSE(f.commit());
  EXPECT_TRUE(f.commit());
}

}  // namespace
}  // namespace muster::base
