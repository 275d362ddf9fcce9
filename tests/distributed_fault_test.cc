// A rank killed or stalled in the middle of a DistributedOptimizer step:
// every other rank's step() must throw an error naming it within the
// communicator's timeout, and the process must then exit (the optimizer's
// background thread must not hang it).
//
// Runs `mpirun -np 3 distributed_fault_worker kill|stall` with
// MUSTER_COMM_TIMEOUT_MS=3000 and orte_abort_on_non_zero_status 0 (so mpirun
// leaves the survivors alive to speak), in its own process group and
// session directory, both removed when the test ends, pass or fail.
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <regex>
#include <string>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

struct MpirunJob {
  pid_t pid = -1;
  int out = -1;
  std::string dir;

  MpirunJob() {
    char tmpl[] = "/tmp/muster-dist-fault-XXXXXX";
    if (::mkdtemp(tmpl)) dir = tmpl;
  }
  ~MpirunJob() {
    if (pid > 0) {
      ::kill(-pid, SIGTERM);
      for (int i = 0; i < 50 && ::waitpid(pid, nullptr, WNOHANG) == 0; ++i) ::usleep(20000);
      ::kill(-pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
    }
    if (out >= 0) ::close(out);
    if (!dir.empty()) std::filesystem::remove_all(dir);
  }

  void start(const std::vector<std::string>& argv) {
    int fds[2];
    ASSERT_EQ(::pipe(fds), 0);
    pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      ::setpgid(0, 0);
      ::dup2(fds[1], 1);
      ::dup2(fds[1], 2);
      ::close(fds[0]);
      ::close(fds[1]);
      std::vector<char*> args;
      for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
      args.push_back(nullptr);
      ::setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 1);
      ::setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 1);
      ::setenv("MUSTER_COMM_TIMEOUT_MS", "3000", 1);
      ::execvp(args[0], args.data());
      ::_exit(127);
    }
    ::setpgid(pid, pid);
    ::close(fds[1]);
    out = fds[0];
  }

  // Reads output until `done(output)` or the deadline.
  template <typename Done>
  std::string read_until(Clock::time_point deadline, Done done) {
    std::string output;
    char buf[4096];
    while (Clock::now() < deadline && !done(output)) {
      pollfd p{out, POLLIN, 0};
      const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
      if (::poll(&p, 1, ms > 0 ? static_cast<int>(ms) : 0) <= 0) continue;
      const ssize_t n = ::read(out, buf, sizeof buf);
      if (n <= 0) break;
      output.append(buf, static_cast<std::size_t>(n));
    }
    return output;
  }
};

std::string env_or(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return v && *v ? v : fallback;
}

class DistributedFaultTest : public ::testing::TestWithParam<std::string> {};

TEST_P(DistributedFaultTest, SurvivorsStepThrowsNamingTheRankAndTheProcessExits) {
  const std::string mode = GetParam();
  const int np = 3, victim = np - 1;
  MpirunJob job;
  ASSERT_FALSE(job.dir.empty());
  const auto started = Clock::now();
  job.start({env_or("MUSTER_MPIEXEC", "mpirun"), "--allow-run-as-root", "--oversubscribe", "-mca", "btl",
             "self,vader,tcp", "-mca", "btl_vader_single_copy_mechanism", "none", "-mca",
             "orte_abort_on_non_zero_status", "0", "-mca", "orte_tmpdir_base", job.dir, "-mca",
             "btl_vader_backing_directory", job.dir, "-x", "MUSTER_COMM_TIMEOUT_MS", "-np", std::to_string(np),
             env_or("MUSTER_BINARY_DIR", ".") + "/bin/distributed_fault_worker", mode});
  const std::regex fault(R"(DIST-FAULT rank (\d+) blamed (-?\d+) after (\d+) ms: ([^\n]*))");
  const std::regex exited(R"(DIST-EXIT rank (\d+) after (\d+) ms)");
  auto count = [](const std::string& out, const std::regex& re) {
    return static_cast<int>(std::distance(std::sregex_iterator(out.begin(), out.end(), re), std::sregex_iterator()));
  };
  const std::string out = job.read_until(started + std::chrono::seconds(60), [&](const std::string& o) {
    return count(o, exited) >= np - 1 || o.find("NO-FAULT") != std::string::npos;
  });

  std::map<int, long> fault_ms;
  for (std::sregex_iterator it(out.begin(), out.end(), fault), end; it != end; ++it) {
    const int rank = std::stoi((*it)[1]);
    const std::string message = (*it)[4];
    fault_ms[rank] = std::stol((*it)[3]);
    EXPECT_NE(rank, victim) << out;
    EXPECT_EQ(std::stoi((*it)[2]), victim) << message;
    EXPECT_NE(message.find("rank " + std::to_string(victim)), std::string::npos) << message;
    EXPECT_NE(message.find("DistributedOptimizer step 3"), std::string::npos) << message;
    EXPECT_LE(fault_ms[rank], 3000 + 6000) << message;  // the configured 3 s, plus slack for a loaded machine
  }
  EXPECT_EQ(static_cast<int>(fault_ms.size()), np - 1) << "not every survivor reported:\n" << out;
  for (std::sregex_iterator it(out.begin(), out.end(), exited), end; it != end; ++it) {
    const int rank = std::stoi((*it)[1]);
    ASSERT_TRUE(fault_ms.count(rank)) << out;
    EXPECT_LE(std::stol((*it)[2]) - fault_ms[rank], 5000) << "shutting the optimizer down took too long:\n" << out;
  }
  EXPECT_EQ(count(out, exited), np - 1) << "a survivor did not get past the optimizer's destructor:\n" << out;
  EXPECT_EQ(out.find("NO-FAULT"), std::string::npos) << out;
}

INSTANTIATE_TEST_SUITE_P(Faults, DistributedFaultTest, ::testing::Values("kill", "stall"));

}  // namespace
