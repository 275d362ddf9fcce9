// base::run_capture, the one way to run a program and keep its output: apart
// or merged, exit codes, a timeout that kills, a program that is not there.
#include "api/base/run_capture.h"

#include <chrono>

#include <gtest/gtest.h>

namespace muster::base {
namespace {

using namespace std::chrono_literals;

TEST(RunCapture, KeepsStdoutAndStderrApartWithTheExitCode) {
  const auto c = run_capture({"sh", "-c", "echo out; echo err >&2; exit 3"});
  EXPECT_FALSE(c.failure);
  EXPECT_EQ(c.exit_code, 3);
  EXPECT_EQ(c.out, "out\n");
  EXPECT_EQ(c.err, "err\n");
  EXPECT_FALSE(c.timed_out);
}

TEST(RunCapture, MergedOutputKeepsTheOrder) {
  const auto c = run_capture({"sh", "-c", "echo one; echo two >&2; echo three"}, {0ms, true});
  EXPECT_EQ(c.exit_code, 0);
  EXPECT_EQ(c.out, "one\ntwo\nthree\n");
  EXPECT_EQ(c.err, "");
}

TEST(RunCapture, ReadsMoreThanAPipeHolds) {
  const auto c = run_capture({"sh", "-c", "head -c 1000000 /dev/zero; head -c 300000 /dev/zero >&2"});
  EXPECT_EQ(c.exit_code, 0);
  EXPECT_EQ(c.out.size(), 1000000u);
  EXPECT_EQ(c.err.size(), 300000u);
}

TEST(RunCapture, ATimeoutKillsTheProgram) {
  const auto start = std::chrono::steady_clock::now();
  const auto c = run_capture({"sh", "-c", "echo started; exec sleep 30"}, {300ms, false});
  EXPECT_TRUE(c.timed_out);
  EXPECT_EQ(c.exit_code, -1);
  EXPECT_EQ(c.out, "started\n");
  EXPECT_LT(std::chrono::steady_clock::now() - start, 10s);
}

TEST(RunCapture, AProgramThatIsNotThereIsAFailure) {
  const auto c = run_capture({"muster-no-such-program-anywhere"});
  ASSERT_TRUE(c.failure);
  EXPECT_NE(c.failure->find("muster-no-such-program-anywhere"), std::string::npos) << *c.failure;
  EXPECT_EQ(c.exit_code, -1);
  EXPECT_TRUE(run_capture({}).failure);
}

TEST(RunCapture, StdinIsEmpty) {
  const auto c = run_capture({"cat"}, {5s, false});
  EXPECT_EQ(c.exit_code, 0);
  EXPECT_EQ(c.out, "");
}

}  // namespace
}  // namespace muster::base
