// muster-agent: runs inside every worker (see agent.h for the protocol).
//
//   muster-agent --kernel python3 --script /abs/train.py -- arg1 arg2
//   muster-agent --kernel python3 --code 'print(1)'
// The command line and the MUSTER_* environment the daemon passes are
// defined (and parsed) in api/agent_protocol.h; a bad one exits 2 with a
// message naming the argument or variable.
#include <cstdio>
#include <string>
#include <vector>

#include "api/agent_protocol.h"
#include "workers/agent/agent.h"

int main(int argc, char** argv) {
  using muster::workers::agent::AgentOptions;
  auto command = muster::api::parse_agent_argv(std::vector<std::string>(argv, argv + argc));
  if (!command) {
    std::fprintf(stderr, "muster-agent: %s\n", command.status().message().c_str());
    return 2;
  }
  auto env = muster::api::parse_agent_env(muster::api::process_env());
  if (!env) {
    std::fprintf(stderr, "muster-agent: %s\n", env.status().message().c_str());
    return 2;
  }
  return muster::workers::agent::run_agent(AgentOptions{*env, *command});
}
