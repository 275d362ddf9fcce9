// base::shell_quote: the one set of quoting rules (clusterspec's and the ssh
// backend's both use it); hostile words come back byte for byte from sh.
#include "api/base/shell_quote.h"

#include <unistd.h>

#include <cstdio>
#include <filesystem>

#include <gtest/gtest.h>

#include "temp_dir.h"

namespace muster::base {
namespace {

TEST(BaseShellQuoteTest, PlainWordsStayEverythingElseIsQuoted) {
  EXPECT_EQ(shell_quote("python3"), "python3");
  EXPECT_EQ(shell_quote("/a/b-c_d.py"), "/a/b-c_d.py");
  EXPECT_EQ(shell_quote(""), "''");
  EXPECT_EQ(shell_quote("it's"), "'it'\\''s'");
  EXPECT_EQ(shell_quote("$(id)"), "'$(id)'");
  EXPECT_EQ(join_for_shell({"cd", "/a b"}), "cd '/a b'");
  EXPECT_TRUE(contains_nul(std::string("a\0b", 3)));
  EXPECT_FALSE(contains_nul("ab"));
}

TEST(BaseShellQuoteTest, HostileWordsNeverRun) {
  namespace fs = std::filesystem;
  muster::testing::TempDir tmp("muster-base-quote");
  const fs::path dir = tmp.path();
  const std::string marker = (dir / "PWNED").string();
  const std::vector<std::string> words = {"$(touch " + marker + ")", "`touch " + marker + "`", "a; touch " + marker,
                                          "x'$(touch " + marker + ")'y", "line\nbreak", "~", "#c"};
  std::string expected, script = "for a in " + join_for_shell(words) + "; do printf '%s|' \"$a\"; done";
  for (const auto& w : words) expected += w + "|";
  FILE* pipe = ::popen(("/bin/sh -c " + shell_quote(script)).c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, pipe)) > 0) out.append(buf, n);
  ::pclose(pipe);
  EXPECT_EQ(out, expected);
  EXPECT_FALSE(fs::exists(marker));
}

}  // namespace
}  // namespace muster::base
