// torchrun's vocabulary: the environment PyTorch's elastic agent gives each
// worker process, and the torchrun line that would start the same job.
//
// A torchrun job has `nnodes` nodes (muster: one worker each) running
// `nproc_per_node` processes each. Process `local_rank` of node `node_rank`
// has global rank node_rank * nproc_per_node + local_rank (torchrun's order
// for a single role), and every process meets the others through the store
// at MASTER_ADDR:MASTER_PORT (rank 0's host), which `init_process_group`
// with `env://` (the default) reads:
//
//   TorchrunWorld w;
//   w.nnodes = 2; w.nproc_per_node = 2;
//   w.master_addr = "10.0.0.5"; w.master_port = 29500; w.run_id = "c-1a2b";
//   rank_environment(w, 1, 0);
//   // {RANK=2, LOCAL_RANK=0, WORLD_SIZE=4, LOCAL_WORLD_SIZE=2, GROUP_RANK=1,
//   //  GROUP_WORLD_SIZE=2, ROLE_RANK=2, ROLE_WORLD_SIZE=4, ROLE_NAME=default,
//   //  MASTER_ADDR=10.0.0.5, MASTER_PORT=29500, TORCHELASTIC_RUN_ID=c-1a2b,
//   //  TORCHELASTIC_RESTART_COUNT=0, TORCHELASTIC_MAX_RESTARTS=0,
//   //  TORCHELASTIC_USE_AGENT_STORE=False, OMP_NUM_THREADS=1 (more than one
//   //  process per node: torchrun's default, which a caller's own
//   //  OMP_NUM_THREADS replaces)}
//
//   TorchrunLine l;
//   l.world = w;
//   l.command = {"train.py", "--epochs", "2"};
//   torchrun_argv(l);
//   // {"torchrun", "--nnodes=2", "--nproc_per_node=2", "--rdzv_backend=c10d",
//   //  "--rdzv_endpoint=10.0.0.5:29500", "--rdzv_id=c-1a2b", "train.py", "--epochs", "2"}
//
// The line is the one every node would run (torchrun's c10d rendezvous), in
// the underscore spelling that torch 1.13 and 2.x both accept. Checks throw
// SpecError naming the field: nnodes and nproc_per_node >= 1, the address as
// names.h allows it, run_id of [A-Za-z0-9_.-], max_restarts >= 0, ranks in
// range, a command that starts with a program and holds no NUL.
#pragma once

#include <map>
#include <string>
#include <vector>

namespace muster::clusterspec {

struct TorchrunWorld {
  int nnodes = 1;
  int nproc_per_node = 1;
  std::string master_addr;   // rank 0's host
  int master_port = 0;       // free on that host
  std::string run_id;        // TORCHELASTIC_RUN_ID / --rdzv_id
  int max_restarts = 0;
  int restart_count = 0;
};

// The variables process `local_rank` of node `node_rank` gets (see above).
std::map<std::string, std::string> rank_environment(const TorchrunWorld& world, int node_rank, int local_rank);

// The variables every process of a node shares (rank_environment() without
// RANK, LOCAL_RANK and ROLE_RANK).
std::map<std::string, std::string> node_environment(const TorchrunWorld& world, int node_rank);

struct TorchrunLine {
  std::string program = "torchrun";
  TorchrunWorld world;
  // A Python script and its arguments; with no_python, a program and its
  // arguments (torchrun --no_python).
  std::vector<std::string> command;
  bool no_python = false;
};

std::vector<std::string> torchrun_argv(const TorchrunLine& line);

}  // namespace muster::clusterspec
