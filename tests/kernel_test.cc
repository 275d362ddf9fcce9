// api/kernel.h: how a kernel and a script become a command line, and the
// two programs that must agree on it: the agent (a worker's script) and the
// cluster manager (every MPI rank's command).
#include "api/kernel.h"

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "service/cluster/mpi_mode.h"
#include "workers/agent/agent.h"

namespace muster {
namespace {

namespace fs = std::filesystem;
using Cmd = std::vector<std::string>;

class KernelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("muster_kernel_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
    for (const char* name : {"train.py", "job.sh", "tool", "data"}) std::ofstream(dir_ / name) << "#!/bin/sh\n";
    ::chmod((dir_ / "tool").c_str(), 0755);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

TEST_F(KernelTest, ScriptRulesUseAbsoluteInterpreters) {
  auto cmd = [](std::string kernel, std::string script, std::function<bool(const std::string&)> x = nullptr) {
    api::KernelCommandOptions o;
    o.kernel = std::move(kernel);
    o.script = std::move(script);
    o.args = {"-n", "2"};
    o.is_executable = std::move(x);
    return api::script_command(o);
  };
  auto yes = [](const std::string&) { return true; };
  auto no = [](const std::string&) { return false; };
  EXPECT_EQ(cmd("python3", "/p/train.py", yes), (Cmd{"/usr/bin/python3", "-u", "/p/train.py", "-n", "2"}));
  EXPECT_EQ(cmd("python3", "/p/job.sh", yes), (Cmd{"/bin/bash", "/p/job.sh", "-n", "2"}));
  EXPECT_EQ(cmd("python3", "/p/tool", yes), (Cmd{"/p/tool", "-n", "2"}));
  EXPECT_EQ(cmd("python3", "/p/data", no), (Cmd{"/usr/bin/python3", "-u", "/p/data", "-n", "2"}));
  EXPECT_EQ(cmd("bash", "/p/train.py", yes), (Cmd{"/bin/bash", "/p/train.py", "-n", "2"}));
  EXPECT_EQ(cmd("executable", "/p/data", no), (Cmd{"/p/data", "-n", "2"}));
}

// The agent runs a worker's script and the cluster manager runs each MPI
// rank with the same rules: the same file gives the same command line.
TEST_F(KernelTest, AgentAndMpiRanksAgree) {
  for (const char* name : {"train.py", "job.sh", "tool", "data"}) {
    const fs::path script = dir_ / name;
    workers::agent::AgentOptions agent;
    agent.command.kernel = api::kKernelPython3;
    agent.command.script = script.string();
    agent.command.args = {"--epochs", "1"};
    EXPECT_EQ(workers::agent::script_command(agent), service::rank_command(script, agent.command.args)) << name;
  }
  // And they are what the rules say, not merely equal.
  EXPECT_EQ(service::rank_command(dir_ / "data", {}), (Cmd{"/usr/bin/python3", "-u", (dir_ / "data").string()}));
  EXPECT_EQ(service::rank_command(dir_ / "tool", {}), (Cmd{(dir_ / "tool").string()}));
  EXPECT_EQ(service::rank_command(dir_ / "job.sh", {}), (Cmd{"/bin/bash", (dir_ / "job.sh").string()}));
}

// python= names the interpreter of the python3 kernel, for workers and ranks alike.
TEST_F(KernelTest, TheRequestsPythonRunsScriptsCodeAndRanks) {
  api::KernelCommandOptions o;
  o.script = (dir_ / "train.py").string();
  o.python = "/venv/bin/python";
  EXPECT_EQ(api::script_command(o), (Cmd{"/venv/bin/python", "-u", o.script}));
  o.script.clear();
  o.code = "print(1)";
  EXPECT_EQ(api::script_command(o), (Cmd{"/venv/bin/python", "-u", "-c", "print(1)"}));
  o.code = "!nvidia-smi";  // a shell line stays bash's
  EXPECT_EQ(api::script_command(o), (Cmd{"/bin/bash", "-c", "nvidia-smi", "muster-worker"}));
  EXPECT_EQ(service::rank_command(dir_ / "train.py", {"-e"}, "/venv/bin/python"),
            (Cmd{"/venv/bin/python", "-u", (dir_ / "train.py").string(), "-e"}));
  workers::agent::AgentOptions agent;
  agent.command.script = (dir_ / "train.py").string();
  agent.command.python = "/venv/bin/python";
  EXPECT_EQ(workers::agent::script_command(agent), service::rank_command(dir_ / "train.py", {}, "/venv/bin/python"));
}

TEST_F(KernelTest, CheckPythonNamesWhatToGive) {
  EXPECT_TRUE(api::check_python("", "python").is_ok());
  EXPECT_TRUE(api::check_python("/bin/sh", "python").is_ok());
  for (const auto& bad : {std::string("python3"), (dir_ / "none").string(), (dir_ / "train.py").string(),
                          dir_.string()}) {
    auto s = api::check_python(bad, "python");
    ASSERT_FALSE(s.is_ok()) << bad;
    EXPECT_EQ(s.field(), "python");
    EXPECT_NE(s.message().find("sys.executable"), std::string::npos) << s.message();
  }
}

TEST(KernelCodeTest, CodeRules) {
  api::KernelCommandOptions o;
  o.code = "print(1)";
  EXPECT_EQ(api::script_command(o), (Cmd{"/usr/bin/python3", "-u", "-c", "print(1)"}));
  o.code = "!nvidia-smi";
  EXPECT_EQ(api::script_command(o), (Cmd{"/bin/bash", "-c", "nvidia-smi", "muster-worker"}));
  o.kernel = "bash";
  o.code = "echo $1";
  o.args = {"x"};
  EXPECT_EQ(api::script_command(o), (Cmd{"/bin/bash", "-c", "echo $1", "muster-worker", "x"}));
}

// `!` lines among Python run in bash, each on its own line, and a failing one
// ends the script with its exit code (the SDKs send code unchanged: this is
// the one place the rule lives).
TEST(KernelCodeTest, ShellLinesAmongPythonRunInBashAndEndTheScriptOnFailure) {
  api::KernelCommandOptions o;
  o.code = "print('py')\n!echo sh $((2+3)) ${BASH_VERSION:+bash}\n!exit 7\nprint('not reached')";
  const auto cmd = api::script_command(o);
  ASSERT_EQ(cmd.size(), 4u);
  EXPECT_EQ(cmd[0], "/usr/bin/python3");
  const std::string code = cmd[3];
  EXPECT_EQ(std::count(code.begin(), code.end(), '\n'), 3) << "line numbers move: " << code;
  char tmpl[] = "/tmp/muster-kernel-XXXXXX";
  const int fd = ::mkstemp(tmpl);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::write(fd, code.data(), code.size()), static_cast<ssize_t>(code.size()));
  ::close(fd);
  FILE* p = ::popen(("/usr/bin/python3 -u " + std::string(tmpl)).c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string out;
  char buf[256];
  while (size_t n = std::fread(buf, 1, sizeof buf, p)) out.append(buf, n);
  const int status = ::pclose(p);
  ::unlink(tmpl);
  EXPECT_EQ(out, "py\nsh 5 bash\n");
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 7);
}

}  // namespace
}  // namespace muster
