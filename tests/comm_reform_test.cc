// Kill one rank of a world formed over a file store (no mpirun), and the
// survivors tear down and form a smaller world in the same processes, as an
// elastic job does each generation: every survivor names the dead rank
// within seconds, the new world's allreduce is right, and each process is
// left with no extra threads, descriptors or /dev/shm objects.
//
// Cases: shm and tcp links with 1 MB allreduces, and "small" (64 floats: the
// one-host small-message path) on shared memory.
//
// Runs comm_reform_worker (see there) `np` times under one shell in a
// process group of its own (MpirunJob, which kills the group at the end).
#include <gtest/gtest.h>

#include <chrono>
#include <regex>
#include <set>
#include <string>
#include <tuple>

#include "mpirun_job.h"

namespace {

using Clock = std::chrono::steady_clock;
using muster::testing::env_or;

using Case = std::tuple<std::string, int>;  // transport, ranks

class ReformTest : public ::testing::TestWithParam<Case> {};

TEST_P(ReformTest, SurvivorsNameTheDeadRankAndFormASmallerWorld) {
  const auto [transport, np] = GetParam();
  const int victim = np - 1;
  const std::string worker = env_or("MUSTER_BINARY_DIR", ".") + "/bin/comm_reform_worker";
  muster::testing::MpirunJob job("muster-comm-reform");  // a process group and a private directory
  std::string script;
  for (int r = 0; r < np; ++r) {
    script += "( '" + worker + "' '" + job.dir() + "/store' " + std::to_string(r) + " " + std::to_string(np) + " " +
              transport + "; echo \"EXIT rank " + std::to_string(r) + " status $?\" ) & ";
  }
  script += "wait";
  const auto started = Clock::now();
  job.start({"/bin/sh", "-c", script}, {});
  const std::string out = job.read_until(started + std::chrono::seconds(90), [&](const std::string& o) {
    std::size_t exits = 0;
    for (std::size_t at = o.find("EXIT rank"); at != std::string::npos; at = o.find("EXIT rank", at + 1)) ++exits;
    return static_cast<int>(exits) == np;
  });

  const std::regex fault(R"(FAULT rank (\d+) blamed (-?\d+) after (\d+) ms: ([^\n]*))");
  std::set<int> faulted;
  for (std::sregex_iterator it(out.begin(), out.end(), fault), end; it != end; ++it) {
    const int rank = std::stoi((*it)[1]);
    faulted.insert(rank);
    EXPECT_NE(rank, victim);
    const std::string message = (*it)[4];
    EXPECT_NE(message.find("rank " + std::to_string(victim)), std::string::npos) << message;
    EXPECT_LT(std::stol((*it)[3]), 10000) << "within the 10 s timeout: " << message;
  }
  EXPECT_EQ(static_cast<int>(faulted.size()), np - 1) << out;
  for (int r = 0; r < victim; ++r) {
    EXPECT_NE(out.find("REFORMED rank " + std::to_string(r) + " of " + std::to_string(np - 1) + " ok"), std::string::npos)
        << out;
    EXPECT_NE(out.find("CLEAN rank " + std::to_string(r) + " threads 0 fds 0 shm 0"), std::string::npos) << out;
    EXPECT_NE(out.find("EXIT rank " + std::to_string(r) + " status 0"), std::string::npos) << out;
  }
  EXPECT_NE(out.find("EXIT rank " + std::to_string(victim) + " status 137"), std::string::npos)
      << "the victim dies of SIGKILL:\n" << out;
  EXPECT_LT(Clock::now() - started, std::chrono::seconds(60)) << out;
}

INSTANTIATE_TEST_SUITE_P(Kills, ReformTest,
                         ::testing::Values(Case{"shm", 3}, Case{"shm", 4}, Case{"tcp", 3}, Case{"tcp", 4},
                                           Case{"small", 3}, Case{"small", 4}),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           return std::get<0>(info.param) + "_np" + std::to_string(std::get<1>(info.param));
                         });

}  // namespace
