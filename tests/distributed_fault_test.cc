// A rank killed or stalled in the middle of a DistributedOptimizer step, or
// killed between steps: every other rank must throw an error naming it within the
// communicator's timeout, and the process must then exit (the optimizer's
// background thread must not hang it).
//
// Runs `mpirun -np 3 distributed_fault_worker kill|stall|exit` with
// MUSTER_COMM_TIMEOUT_MS=3000 and orte_abort_on_non_zero_status 0 (so mpirun
// leaves the survivors alive to speak), in its own process group and
// session directory, both removed when the test ends, pass or fail.
#include <gtest/gtest.h>

#include <chrono>
#include <map>
#include <regex>
#include <string>
#include <vector>

#include "mpirun_job.h"

namespace {

using Clock = std::chrono::steady_clock;
using muster::testing::env_or;

class DistributedFaultTest : public ::testing::TestWithParam<std::string> {};

TEST_P(DistributedFaultTest, SurvivorsStepThrowsNamingTheRankAndTheProcessExits) {
  const std::string mode = GetParam();
  const int np = 3, victim = np - 1;
  muster::testing::MpirunJob job("muster-dist-fault");
  const auto started = Clock::now();
  job.start(job.fault_mpirun_argv(np, {env_or("MUSTER_BINARY_DIR", ".") + "/bin/distributed_fault_worker", mode}),
            {{"MUSTER_COMM_TIMEOUT_MS", "3000"}});
  const std::regex fault(R"(DIST-FAULT rank (\d+) blamed (-?\d+) after (\d+) ms at ([a-z_ 0-9]+): ([^\n]*))");
  const std::regex exited(R"(DIST-EXIT rank (\d+) after (\d+) ms)");
  auto count = [](const std::string& out, const std::regex& re) {
    return static_cast<int>(std::distance(std::sregex_iterator(out.begin(), out.end(), re), std::sregex_iterator()));
  };
  const std::string out = job.read_until(started + std::chrono::seconds(60), [&](const std::string& o) {
    return count(o, exited) >= np - 1 || o.find("NO-FAULT") != std::string::npos;
  });

  std::map<int, long> fault_ms;
  for (std::sregex_iterator it(out.begin(), out.end(), fault), end; it != end; ++it) {
    const int rank = std::stoi((*it)[1]);
    const std::string call = (*it)[4];
    const std::string message = (*it)[5];
    fault_ms[rank] = std::stol((*it)[3]);
    EXPECT_NE(rank, victim) << out;
    EXPECT_EQ(std::stoi((*it)[2]), victim) << message;
    EXPECT_NE(message.find("rank " + std::to_string(victim)), std::string::npos) << message;
    EXPECT_NE(message.find("DistributedOptimizer step 3"), std::string::npos) << message;
    EXPECT_LE(fault_ms[rank], 3000 + 6000) << message;  // the configured 3 s, plus slack for a loaded machine
    // A peer gone before the step began: the first gradient says so, not the
    // end of the backward pass (the allreduce that could never finish).
    if (mode == "exit") {
      EXPECT_EQ(call, "grad_ready 19") << message;
    }
  }
  EXPECT_EQ(static_cast<int>(fault_ms.size()), np - 1) << "not every survivor reported:\n" << out;
  for (std::sregex_iterator it(out.begin(), out.end(), exited), end; it != end; ++it) {
    const int rank = std::stoi((*it)[1]);
    ASSERT_TRUE(fault_ms.count(rank)) << out;
    EXPECT_LE(std::stol((*it)[2]) - fault_ms[rank], 5000) << "shutting the optimizer down took too long:\n" << out;
  }
  EXPECT_EQ(count(out, exited), np - 1) << "a survivor did not get past the optimizer's destructor:\n" << out;
  EXPECT_EQ(out.find("NO-FAULT"), std::string::npos) << out;
}

INSTANTIATE_TEST_SUITE_P(Faults, DistributedFaultTest, ::testing::Values("kill", "stall", "exit"));

}  // namespace
