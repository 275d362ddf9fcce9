#include "clusterspec/torchrun.h"

#include "clusterspec/names.h"
#include "clusterspec/spec_error.h"

namespace muster::clusterspec {
namespace {

void check_world(const TorchrunWorld& w) {
  if (w.nnodes < 1) throw SpecError("nnodes " + std::to_string(w.nnodes) + " must be at least 1");
  if (w.nproc_per_node < 1) {
    throw SpecError("nproc_per_node " + std::to_string(w.nproc_per_node) + " must be at least 1");
  }
  if (!is_valid_host(w.master_addr)) throw SpecError("master_addr " + quoted(w.master_addr) + " " + kHostRule);
  if (w.master_port < 1 || w.master_port > 65535) {
    throw SpecError("master_port " + std::to_string(w.master_port) + " is not in 1..65535");
  }
  if (w.run_id.empty()) throw SpecError("run_id is empty");
  for (char c : w.run_id) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
                    c == '-' || c == '.';
    if (!ok) throw SpecError("run_id " + quoted(w.run_id) + " must be of [A-Za-z0-9_.-]");
  }
  if (w.max_restarts < 0) throw SpecError("max_restarts " + std::to_string(w.max_restarts) + " must be >= 0");
  if (w.restart_count < 0 || w.restart_count > w.max_restarts) {
    throw SpecError("restart_count " + std::to_string(w.restart_count) + " must be in 0..max_restarts (" +
                    std::to_string(w.max_restarts) + ")");
  }
}

}  // namespace

std::map<std::string, std::string> node_environment(const TorchrunWorld& w, int node_rank) {
  check_world(w);
  if (node_rank < 0 || node_rank >= w.nnodes) {
    throw SpecError("node_rank " + std::to_string(node_rank) + " is not in 0.." + std::to_string(w.nnodes - 1));
  }
  const std::string world_size = std::to_string(w.nnodes * w.nproc_per_node);
  std::map<std::string, std::string> env = {
      {"WORLD_SIZE", world_size},
      {"LOCAL_WORLD_SIZE", std::to_string(w.nproc_per_node)},
      {"GROUP_RANK", std::to_string(node_rank)},
      {"GROUP_WORLD_SIZE", std::to_string(w.nnodes)},
      {"ROLE_NAME", "default"},
      {"ROLE_WORLD_SIZE", world_size},
      {"MASTER_ADDR", w.master_addr},
      {"MASTER_PORT", std::to_string(w.master_port)},
      {"TORCHELASTIC_RUN_ID", w.run_id},
      {"TORCHELASTIC_RESTART_COUNT", std::to_string(w.restart_count)},
      {"TORCHELASTIC_MAX_RESTARTS", std::to_string(w.max_restarts)},
      // No agent hosts the store: rank 0's process does (env:// creates it).
      {"TORCHELASTIC_USE_AGENT_STORE", "False"},
  };
  // torchrun's rule: several processes on a node get one OpenMP thread each
  // unless the caller chose (callers drop it when they set their own).
  if (w.nproc_per_node > 1) env["OMP_NUM_THREADS"] = "1";
  return env;
}

std::map<std::string, std::string> rank_environment(const TorchrunWorld& w, int node_rank, int local_rank) {
  auto env = node_environment(w, node_rank);
  if (local_rank < 0 || local_rank >= w.nproc_per_node) {
    throw SpecError("local_rank " + std::to_string(local_rank) + " is not in 0.." +
                    std::to_string(w.nproc_per_node - 1));
  }
  const std::string rank = std::to_string(node_rank * w.nproc_per_node + local_rank);
  env["RANK"] = rank;
  env["ROLE_RANK"] = rank;
  env["LOCAL_RANK"] = std::to_string(local_rank);
  return env;
}

std::vector<std::string> torchrun_argv(const TorchrunLine& line) {
  check_world(line.world);
  if (line.program.empty() || line.program[0] == '-') throw SpecError("program must name a program");
  if (line.command.empty()) throw SpecError("command is empty: give the script every process runs, e.g. train.py");
  if (line.command[0].empty() || line.command[0][0] == '-') {
    throw SpecError("command must start with a script or program, not " + quoted(line.command[0]));
  }
  for (std::size_t i = 0; i < line.command.size(); ++i) {
    if (line.command[i].find('\0') != std::string::npos) {
      throw SpecError("command[" + std::to_string(i) + "] contains a NUL byte");
    }
  }
  const TorchrunWorld& w = line.world;
  std::vector<std::string> argv = {line.program,
                                   "--nnodes=" + std::to_string(w.nnodes),
                                   "--nproc_per_node=" + std::to_string(w.nproc_per_node),
                                   "--rdzv_backend=c10d",
                                   "--rdzv_endpoint=" + format_address(w.master_addr, w.master_port),
                                   "--rdzv_id=" + w.run_id};
  if (w.max_restarts > 0) argv.push_back("--max_restarts=" + std::to_string(w.max_restarts));
  if (line.no_python) argv.push_back("--no_python");
  argv.insert(argv.end(), line.command.begin(), line.command.end());
  return argv;
}

}  // namespace muster::clusterspec
