// muster-agent: runs inside every worker (see agent.h for the protocol).
//
//   muster-agent --kernel python3 --script /abs/train.py -- arg1 arg2
//   muster-agent --kernel python3 --code 'print(1)'
// The daemon passes the rest in the environment: MUSTER_URL,
// MUSTER_WORKER_ID, MUSTER_AGENT_TOKEN, MUSTER_MASTER_IP, MUSTER_HEARTBEAT_S,
// MUSTER_RESERVE_PORT, MUSTER_CPU, MUSTER_MEMORY_GB, MUSTER_ORPHAN_TIMEOUT_S.
#include <cstdio>
#include <cstdlib>
#include <string>

#include "workers/agent/agent.h"

namespace {
std::string env_or(const char* name, const std::string& fallback = "") {
  const char* v = std::getenv(name);
  return v ? v : fallback;
}
}  // namespace

int main(int argc, char** argv) {
  using muster::workers::agent::AgentOptions;
  AgentOptions o;
  o.url = env_or("MUSTER_URL");
  o.worker_id = env_or("MUSTER_WORKER_ID");
  o.token = env_or("MUSTER_AGENT_TOKEN");
  o.master_ip = env_or("MUSTER_MASTER_IP");
  o.reserve_port = env_or("MUSTER_RESERVE_PORT") == "1";
  o.cpu = std::atof(env_or("MUSTER_CPU", "0").c_str());
  o.memory_gb = std::atof(env_or("MUSTER_MEMORY_GB", "0").c_str());
  const double hb = std::atof(env_or("MUSTER_HEARTBEAT_S", "2").c_str());
  o.heartbeat = std::chrono::milliseconds(static_cast<long>((hb > 0 ? hb : 2) * 1000));
  const double orphan = std::atof(env_or("MUSTER_ORPHAN_TIMEOUT_S", "300").c_str());
  if (orphan > 0) o.orphan_timeout = std::chrono::milliseconds(static_cast<long>(orphan * 1000));
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--" ) {
      for (++i; i < argc; ++i) o.args.push_back(argv[i]);
    } else if (i + 1 < argc && a == "--kernel") {
      o.kernel = argv[++i];
    } else if (i + 1 < argc && a == "--script") {
      o.script = argv[++i];
    } else if (i + 1 < argc && a == "--code") {
      o.code = argv[++i];
    } else {
      std::fprintf(stderr, "muster-agent: unknown argument '%s'\n", a.c_str());
      return 2;
    }
  }
  if (o.script.empty() == o.code.empty()) {
    std::fprintf(stderr, "muster-agent: give exactly one of --script and --code\n");
    return 2;
  }
  return muster::workers::agent::run_agent(o);
}
