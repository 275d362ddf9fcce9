// clusterspec/torchrun.h: torchrun's environment per process and its line.
#include "clusterspec/torchrun.h"

#include <functional>

#include <gtest/gtest.h>

#include "clusterspec/spec_error.h"

namespace muster::clusterspec {
namespace {

using Argv = std::vector<std::string>;
using Env = std::map<std::string, std::string>;

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const SpecError& e) {
    return e.what();
  }
  return "(no error)";
}

TorchrunWorld two_by_two() {
  TorchrunWorld w;
  w.nnodes = 2;
  w.nproc_per_node = 2;
  w.master_addr = "10.0.0.5";
  w.master_port = 29500;
  w.run_id = "c-1a2b";
  return w;
}

TEST(TorchrunEnvironmentTest, EveryVariableTorchrunSets) {
  EXPECT_EQ(rank_environment(two_by_two(), 1, 0), (Env{{"RANK", "2"},
                                                       {"LOCAL_RANK", "0"},
                                                       {"WORLD_SIZE", "4"},
                                                       {"LOCAL_WORLD_SIZE", "2"},
                                                       {"GROUP_RANK", "1"},
                                                       {"GROUP_WORLD_SIZE", "2"},
                                                       {"ROLE_RANK", "2"},
                                                       {"ROLE_WORLD_SIZE", "4"},
                                                       {"ROLE_NAME", "default"},
                                                       {"MASTER_ADDR", "10.0.0.5"},
                                                       {"MASTER_PORT", "29500"},
                                                       {"TORCHELASTIC_RUN_ID", "c-1a2b"},
                                                       {"TORCHELASTIC_RESTART_COUNT", "0"},
                                                       {"TORCHELASTIC_MAX_RESTARTS", "0"},
                                                       {"TORCHELASTIC_USE_AGENT_STORE", "False"},
                                                       {"OMP_NUM_THREADS", "1"}}));
}

TEST(TorchrunEnvironmentTest, RanksAreNodeMajorAndCoverTheWorldOnce) {
  TorchrunWorld w = two_by_two();
  w.nnodes = 3;
  std::vector<int> seen;
  for (int node = 0; node < 3; ++node) {
    for (int local = 0; local < 2; ++local) {
      auto env = rank_environment(w, node, local);
      EXPECT_EQ(env["RANK"], std::to_string(node * 2 + local));
      EXPECT_EQ(env["ROLE_RANK"], env["RANK"]);
      EXPECT_EQ(env["LOCAL_RANK"], std::to_string(local));
      EXPECT_EQ(env["GROUP_RANK"], std::to_string(node));
      EXPECT_EQ(env["WORLD_SIZE"], "6");
      seen.push_back(std::stoi(env["RANK"]));
    }
  }
  EXPECT_EQ(seen, (std::vector<int>{0, 1, 2, 3, 4, 5}));
}

TEST(TorchrunEnvironmentTest, OneProcessPerNodeKeepsTheCallersThreads) {
  TorchrunWorld w = two_by_two();
  w.nproc_per_node = 1;
  auto env = rank_environment(w, 1, 0);
  EXPECT_EQ(env.count("OMP_NUM_THREADS"), 0u);
  EXPECT_EQ(env["RANK"], "1");
  EXPECT_EQ(env["LOCAL_WORLD_SIZE"], "1");
  EXPECT_EQ(node_environment(w, 0).count("RANK"), 0u);
}

TEST(TorchrunEnvironmentTest, RestartsAreCounted) {
  TorchrunWorld w = two_by_two();
  w.max_restarts = 3;
  w.restart_count = 2;
  auto env = rank_environment(w, 0, 1);
  EXPECT_EQ(env["TORCHELASTIC_MAX_RESTARTS"], "3");
  EXPECT_EQ(env["TORCHELASTIC_RESTART_COUNT"], "2");
}

TEST(TorchrunEnvironmentTest, BadWorldsNameTheField) {
  auto w = two_by_two();
  EXPECT_EQ(error_of([&] { rank_environment(w, 2, 0); }), "node_rank 2 is not in 0..1");
  EXPECT_EQ(error_of([&] { rank_environment(w, 0, 2); }), "local_rank 2 is not in 0..1");
  w.nproc_per_node = 0;
  EXPECT_EQ(error_of([&] { rank_environment(w, 0, 0); }), "nproc_per_node 0 must be at least 1");
  w = two_by_two();
  w.master_port = 0;
  EXPECT_EQ(error_of([&] { node_environment(w, 0); }), "master_port 0 is not in 1..65535");
  w = two_by_two();
  w.master_addr = "-oProxy=x";
  EXPECT_NE(error_of([&] { node_environment(w, 0); }).find("master_addr \"-oProxy=x\""), std::string::npos);
  w = two_by_two();
  w.run_id = "a b";
  EXPECT_EQ(error_of([&] { node_environment(w, 0); }), "run_id \"a b\" must be of [A-Za-z0-9_.-]");
  w = two_by_two();
  w.restart_count = 1;
  EXPECT_EQ(error_of([&] { node_environment(w, 0); }), "restart_count 1 must be in 0..max_restarts (0)");
}

TEST(TorchrunLineTest, TheLineEveryNodeRuns) {
  TorchrunLine l;
  l.world = two_by_two();
  l.command = {"/p/train.py", "--epochs", "2"};
  EXPECT_EQ(torchrun_argv(l), (Argv{"torchrun", "--nnodes=2", "--nproc_per_node=2", "--rdzv_backend=c10d",
                                    "--rdzv_endpoint=10.0.0.5:29500", "--rdzv_id=c-1a2b", "/p/train.py",
                                    "--epochs", "2"}));
}

TEST(TorchrunLineTest, RestartsAndProgramsThatAreNotPython) {
  TorchrunLine l;
  l.world = two_by_two();
  l.world.max_restarts = 3;
  l.no_python = true;
  l.command = {"/p/bin/train"};
  EXPECT_EQ(torchrun_argv(l), (Argv{"torchrun", "--nnodes=2", "--nproc_per_node=2", "--rdzv_backend=c10d",
                                    "--rdzv_endpoint=10.0.0.5:29500", "--rdzv_id=c-1a2b", "--max_restarts=3",
                                    "--no_python", "/p/bin/train"}));
}

TEST(TorchrunLineTest, BadCommandsAreRefused) {
  TorchrunLine l;
  l.world = two_by_two();
  EXPECT_EQ(error_of([&] { torchrun_argv(l); }),
            "command is empty: give the script every process runs, e.g. train.py");
  l.command = {"--standalone"};
  EXPECT_EQ(error_of([&] { torchrun_argv(l); }), "command must start with a script or program, not \"--standalone\"");
  l.command = {"t.py", std::string("a\0b", 3)};
  EXPECT_EQ(error_of([&] { torchrun_argv(l); }), "command[1] contains a NUL byte");
  l.command = {"t.py"};
  l.world.nnodes = 0;
  EXPECT_EQ(error_of([&] { torchrun_argv(l); }), "nnodes 0 must be at least 1");
}

}  // namespace
}  // namespace muster::clusterspec
