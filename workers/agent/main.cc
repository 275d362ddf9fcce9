// muster-agent: runs inside every worker (see agent.h for the protocol).
//
//   muster-agent --kernel python3 --script /abs/train.py -- arg1 arg2
//   muster-agent --kernel python3 --code 'print(1)'
//   muster-agent --log-relay /state/clusters/c1/launcher.log --max-bytes N --keep K
// The command line and the MUSTER_* environment the daemon passes are
// defined (and parsed) in api/agent_protocol.h and api/log_capture.h; a bad
// one exits 2 with a message naming the argument or variable. With
// MUSTER_LOG_FILE the agent's and the script's output go through the log
// relay (log_relay.h); --log-relay runs only the relay, on stdin.
#include <sys/resource.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "api/agent_protocol.h"
#include "api/log_capture.h"
#include "workers/agent/agent.h"
#include "workers/agent/log_relay.h"

namespace {

// musterd raised its open-files limit for itself (api::kEnvFileLimit); the
// worker gets the one the daemon was started with.
void restore_file_limit() {
  const char* soft = std::getenv(muster::api::kEnvFileLimit);
  if (!soft) return;
  char* end = nullptr;
  const unsigned long long want = std::strtoull(soft, &end, 10);
  rlimit files{};
  if (end != soft && *end == '\0' && ::getrlimit(RLIMIT_NOFILE, &files) == 0 && want < files.rlim_cur) {
    files.rlim_cur = static_cast<rlim_t>(want);
    ::setrlimit(RLIMIT_NOFILE, &files);
  }
  ::unsetenv(muster::api::kEnvFileLimit);
}

}  // namespace

int main(int argc, char** argv) {
  using muster::workers::agent::AgentOptions;
  restore_file_limit();
  const std::vector<std::string> args(argv, argv + argc);
  auto relay = muster::api::parse_log_relay_argv(args);
  if (!relay) {
    std::fprintf(stderr, "muster-agent: %s\n", relay.status().message().c_str());
    return 2;
  }
  if (relay.value()) return muster::workers::agent::run_log_relay(STDIN_FILENO, *relay.value());
  auto command = muster::api::parse_agent_argv(args);
  if (!command) {
    std::fprintf(stderr, "muster-agent: %s\n", command.status().message().c_str());
    return 2;
  }
  const auto process_env = muster::api::process_env();
  auto env = muster::api::parse_agent_env(process_env);
  if (!env) {
    std::fprintf(stderr, "muster-agent: %s\n", env.status().message().c_str());
    return 2;
  }
  auto capture = muster::api::parse_log_capture_env(process_env);
  if (!capture) {
    std::fprintf(stderr, "muster-agent: %s\n", capture.status().message().c_str());
    return 2;
  }
  // Before any thread starts (the relay is forked).
  pid_t relay_pid = -1;
  if (capture.value()) {
    auto started = muster::workers::agent::start_log_capture(*capture.value());
    if (started.failure) {
      std::fprintf(stderr, "muster-agent: cannot capture the output into %s (%s); writing it uncapped\n",
                   capture.value()->path.c_str(), started.failure->c_str());
    }
    relay_pid = started.relay;
  }
  const int code = muster::workers::agent::run_agent(AgentOptions{*env, *command, relay_pid});
  // The relay writes what is left once the last writer is gone; a process
  // the script left running may hold the pipe, so the wait is bounded.
  muster::workers::agent::finish_log_capture(relay_pid, std::chrono::seconds(2));
  return code;
}
