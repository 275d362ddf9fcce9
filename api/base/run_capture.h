// run_capture: run a program to completion and keep what it printed, the one
// way the daemon's side does it (Slurm's commands, the container backend's
// `ip`/`mount` calls, nvidia-smi).
//
// Contract
// - argv[0] is looked up on PATH as spawn() does; no shell; stdin is
//   /dev/null; no descriptor and no blocked signal is inherited (the floor's
//   spawn, api/base/process.h).
// - stdout and stderr are collected apart (`out`, `err`), or both into `out`
//   in the order they came when `merge_stderr`.
// - After `timeout` (none when zero or less) the program is killed (SIGKILL),
//   reaped, and `timed_out` is set; exit_code is then -1.
// - A program that could not start has `failure` set and exit_code -1.
// Blocks the calling thread; safe from any thread of a threaded daemon.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "api/base/error.h"

namespace muster::base {

struct Captured {
  int exit_code = -1;  // the shell's exit code (128+signal when killed by one); -1: not started or timed out
  std::string out;
  std::string err;
  bool timed_out = false;
  Failure failure;  // set: nothing was started
};

struct CaptureOptions {
  std::chrono::milliseconds timeout{0};  // <= 0: wait as long as it runs
  bool merge_stderr = false;
};

[[nodiscard]] Captured run_capture(const std::vector<std::string>& argv, const CaptureOptions& options = {});

}  // namespace muster::base
