// shell_quote / join_for_shell: hostile strings come back from a real shell
// byte for byte, and never run anything.
#include "clusterspec/shell.h"

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "clusterspec/spec_error.h"
#include "temp_dir.h"

namespace muster::clusterspec {
namespace {

const std::vector<std::string>& hostile_strings() {
  static const std::vector<std::string> kStrings = {
      "plain",
      "",
      "two words",
      "it's",
      "'",
      "''",
      "\"double\"",
      "$(touch PWNED)",
      "`touch PWNED`",
      "${HOME}",
      "$HOME",
      "a; touch PWNED",
      "a && touch PWNED",
      "a | touch PWNED",
      "a > PWNED",
      "line1\nline2",
      "\ttab",
      "back\\slash",
      "*",
      "~",
      "#comment",
      "-rf",
      "--flag=value",
      "!event",
      "'\"'\"'",
      "\\'",
      "x'$(touch PWNED)'y",
      "\x01\x7f\xff",
      "ünïcödé",
  };
  return kStrings;
}

// Runs `sh -c "printf '%s\n' ..."`-style round trip: the shell prints each
// word it received as <len>:<bytes>; returns what it printed.
std::string round_trip(const std::string& shell, const std::vector<std::string>& words) {
  std::string script = "for a in " + join_for_shell(words) + "; do printf '%s:%s|' \"${#a}\" \"$a\"; done";
  std::string command = shell + " -c " + shell_quote(script);
  FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) return "(popen failed)";
  std::string out;
  char buffer[4096];
  size_t n;
  while ((n = std::fread(buffer, 1, sizeof buffer, pipe)) > 0) out.append(buffer, n);
  ::pclose(pipe);
  return out;
}

TEST(ShellQuoteTest, PlainWordsStayAsTheyAre) {
  EXPECT_EQ(shell_quote("python3"), "python3");
  EXPECT_EQ(shell_quote("10.0.0.5:1,10.0.0.6:1"), "10.0.0.5:1,10.0.0.6:1");
  EXPECT_EQ(shell_quote("NCCL_SOCKET_IFNAME=eth0"), "NCCL_SOCKET_IFNAME=eth0");
  EXPECT_EQ(shell_quote("/a/b.py"), "/a/b.py");
}

TEST(ShellQuoteTest, EverythingElseIsSingleQuoted) {
  EXPECT_EQ(shell_quote(""), "''");
  EXPECT_EQ(shell_quote("a b"), "'a b'");
  EXPECT_EQ(shell_quote("it's"), "'it'\\''s'");
  EXPECT_EQ(shell_quote("$(id)"), "'$(id)'");
  EXPECT_EQ(shell_quote("^openib"), "'^openib'");
  EXPECT_EQ(shell_quote("~"), "'~'");
  EXPECT_EQ(shell_quote("#x"), "'#x'");
  EXPECT_EQ(join_for_shell({"echo", "a b", "c"}), "echo 'a b' c");
  EXPECT_EQ(join_for_shell({}), "");
}

TEST(ShellQuoteTest, NulIsRejected) {
  EXPECT_THROW(shell_quote(std::string("a\0b", 3)), SpecError);
  EXPECT_THROW(join_for_shell({"ok", std::string("\0", 1)}), SpecError);
}

TEST(ShellQuoteTest, HostileStringsSurviveRealShellsUnchanged) {
  namespace fs = std::filesystem;
  muster::testing::TempDir tmp("muster-quote");
  const fs::path dir = tmp.path();
  const fs::path old_cwd = fs::current_path();
  fs::current_path(dir);
  std::string expected;
  for (const auto& s : hostile_strings()) expected += std::to_string(s.size()) + ":" + s + "|";
  for (const char* shell : {"/bin/sh", "/bin/bash"}) {
    if (!fs::exists(shell)) continue;
    // LC_ALL=C so ${#a} counts bytes, not characters.
    EXPECT_EQ(round_trip(std::string("LC_ALL=C ") + shell, hostile_strings()), expected) << shell;
  }
  const bool pwned = fs::exists(dir / "PWNED");
  fs::current_path(old_cwd);
  EXPECT_FALSE(pwned) << "a quoted string ran a command";
}

}  // namespace
}  // namespace muster::clusterspec
