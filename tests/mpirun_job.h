// MpirunJob: a real `mpirun` for the tests that kill or stall a rank
// (comm_fault_test, distributed_fault_test). It starts through base::spawn
// in a process group of its own, with stdout and stderr on a pipe the test
// reads, and gets a private directory for Open MPI's session files and
// shared-memory segments (a killed job leaves them behind). The destructor
// ends the whole group (SIGTERM, SIGKILL after a second) and removes the
// directory, pass or fail.
//
//   MpirunJob job("muster-comm-fault");
//   job.start(job.fault_mpirun_argv(3, {worker, "kill", "ring"}), {{"MUSTER_COMM_TIMEOUT_MS", "3000"}});
//   std::string out = job.read_until(deadline, [](const std::string& o) { return o.find("DONE") != o.npos; });
#pragma once

#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "api/base/process.h"
#include "temp_dir.h"

namespace muster::testing {

// $name, or `fallback` when it is unset or empty.
inline std::string env_or(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return v && *v ? v : fallback;
}

class MpirunJob {
 public:
  using Clock = std::chrono::steady_clock;

  explicit MpirunJob(const std::string& prefix) : dir_(prefix) {}
  ~MpirunJob() {
    if (pid_ > 0) {
      ::kill(-pid_, SIGTERM);
      for (int i = 0; i < 50 && ::waitpid(pid_, nullptr, WNOHANG) == 0; ++i) ::usleep(20000);
      ::kill(-pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
    if (out_ >= 0) ::close(out_);
  }
  MpirunJob(const MpirunJob&) = delete;
  MpirunJob& operator=(const MpirunJob&) = delete;

  // mpirun's argv for a fault test: `np` ranks of `program_and_args` on this
  // machine, Open MPI's files under dir(), root allowed, and
  // orte_abort_on_non_zero_status off so mpirun leaves the survivors alive
  // to report; MUSTER_COMM_TIMEOUT_MS is forwarded to the ranks.
  std::vector<std::string> fault_mpirun_argv(int np, const std::vector<std::string>& program_and_args) const {
    std::vector<std::string> argv = {env_or("MUSTER_MPIEXEC", "mpirun"), "--allow-run-as-root", "--oversubscribe",
                                     "-mca", "btl", "self,vader,tcp", "-mca", "btl_vader_single_copy_mechanism",
                                     "none", "-mca", "orte_abort_on_non_zero_status", "0", "-mca",
                                     "orte_tmpdir_base", dir(), "-mca", "btl_vader_backing_directory", dir(), "-x",
                                     "MUSTER_COMM_TIMEOUT_MS", "-np", std::to_string(np)};
    argv.insert(argv.end(), program_and_args.begin(), program_and_args.end());
    return argv;
  }

  // Starts `argv` with `env` over this process's environment (plus Open
  // MPI's run-as-root permission). Call once; a failure fails the test.
  void start(const std::vector<std::string>& argv, std::map<std::string, std::string> env) {
    int fds[2];
    ASSERT_EQ(::pipe2(fds, O_CLOEXEC), 0);
    env["OMPI_ALLOW_RUN_AS_ROOT"] = "1";
    env["OMPI_ALLOW_RUN_AS_ROOT_CONFIRM"] = "1";
    base::SpawnOptions o;
    o.argv = argv;
    o.env = std::move(env);
    o.output_fd = fds[1];
    o.new_session = false;
    o.new_process_group = true;
    auto spawned = base::spawn(o);
    ::close(fds[1]);
    out_ = fds[0];
    ASSERT_FALSE(spawned.failure) << *spawned.failure;
    pid_ = spawned.id.pid;
  }

  // Reads the job's output until `done(output)` or the deadline; returns what was read.
  template <typename Done>
  std::string read_until(Clock::time_point deadline, Done done) {
    std::string output;
    char buf[4096];
    while (Clock::now() < deadline && !done(output)) {
      pollfd p{out_, POLLIN, 0};
      const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
      if (::poll(&p, 1, ms > 0 ? static_cast<int>(ms) : 0) <= 0) continue;
      const ssize_t n = ::read(out_, buf, sizeof buf);
      if (n <= 0) break;
      output.append(buf, static_cast<std::size_t>(n));
    }
    return output;
  }

  // waitpid(WNOHANG) for up to `timeout`: mpirun's wait status once it has
  // ended by itself (the destructor then has nothing to end), else nullopt.
  std::optional<int> wait_exit(std::chrono::milliseconds timeout) {
    const auto until = Clock::now() + timeout;
    int status = 0;
    while (pid_ > 0) {
      const pid_t w = ::waitpid(pid_, &status, WNOHANG);
      if (w == pid_) {
        pid_ = -1;
        return status;
      }
      if (w < 0 || Clock::now() >= until) break;
      ::usleep(100000);
    }
    return std::nullopt;
  }

  std::string dir() const { return dir_.str(); }

 private:
  TempDir dir_;
  pid_t pid_ = -1;
  int out_ = -1;
};

}  // namespace muster::testing
