// The agent's log relay: the one process that writes a worker's log file.
//
// start_log_capture() runs first thing in muster-agent: it forks the relay
// (a child with an empty environment, its inherited one zeroed so it holds
// no copy of the agent's token, named muster-logrelay in ps, in a
// process group of its own, SIGTERM, SIGINT and SIGHUP ignored) and makes a
// pipe to it the agent's stdout and stderr,
// so the agent's lines and the script's output (which inherits them) reach
// the file only through the relay, capped and rotated by base::RotatingLog.
// The relay exits once every writer has closed the pipe (the agent, the
// script and anything they left running), so no byte written before a stop
// or a crash of the agent is lost: the pipe keeps it for the relay.
// finish_log_capture() closes the agent's ends and waits (bounded) for the
// relay to write what is left.
//
// `muster-agent --log-relay PATH ...` (api/log_capture.h) runs the same loop
// on its stdin: the cluster launcher pipes mpirun's output through it.
#pragma once

#include <sys/types.h>

#include <chrono>

#include "api/base/error.h"
#include "api/log_capture.h"

namespace muster::workers::agent {

// Copies `in_fd` into the log until end of file; 0, or 1 when the log could
// not be opened (then the bytes go to this process's stdout, uncapped, after
// one line saying why).
int run_log_relay(int in_fd, const api::LogCapture& capture);

// The relay's pid, or a failure (nothing changed then).
struct CaptureStarted {
  pid_t relay = -1;
  base::Failure failure;
};
CaptureStarted start_log_capture(const api::LogCapture& capture);
// Closes stdout and stderr (onto /dev/null) and waits up to `patience` for
// the relay to drain; false when it is still running (another process holds
// the pipe).
bool finish_log_capture(pid_t relay, std::chrono::milliseconds patience);

}  // namespace muster::workers::agent
