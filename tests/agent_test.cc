// muster-agent's pure parts: how a kernel and script become a command line,
// URL parsing, the route to the daemon, and port reservation.
#include "workers/agent/agent.h"

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>
#include <arpa/inet.h>

#include <fstream>

#include "api/kernel.h"
#include "workers/agent/http_client.h"
#include "workers/agent/network.h"

using muster::workers::agent::AgentOptions;
using muster::workers::agent::script_command;
using Cmd = std::vector<std::string>;

namespace {

AgentOptions with(std::string kernel, std::string script, std::string code = "") {
  AgentOptions o;
  o.command.kernel = std::move(kernel);
  o.command.script = std::move(script);
  o.command.code = std::move(code);
  o.command.args = {"--epochs", "2"};
  return o;
}

TEST(ScriptCommand, ByKernelAndFile) {
  char tmpl[] = "/tmp/muster-agent-XXXXXX";
  const std::string dir = mkdtemp(tmpl);
  const std::string exe = dir + "/tool", plain = dir + "/data";
  std::ofstream(exe) << "#!/bin/sh\n";
  std::ofstream(plain) << "print(1)\n";
  ::chmod(exe.c_str(), 0755);

  EXPECT_EQ(script_command(with("python3", "/p/train.py")),
            (Cmd{"/usr/bin/python3", "-u", "/p/train.py", "--epochs", "2"}));
  EXPECT_EQ(script_command(with("python3", "/p/job.sh")), (Cmd{"/bin/bash", "/p/job.sh", "--epochs", "2"}));
  EXPECT_EQ(script_command(with("python3", exe)), (Cmd{exe, "--epochs", "2"}));
  EXPECT_EQ(script_command(with("python3", plain)), (Cmd{"/usr/bin/python3", "-u", plain, "--epochs", "2"}));
  EXPECT_EQ(script_command(with("bash", "/p/x.py")), (Cmd{"/bin/bash", "/p/x.py", "--epochs", "2"}));
  EXPECT_EQ(script_command(with("executable", exe)), (Cmd{exe, "--epochs", "2"}));
  EXPECT_EQ(script_command(with("python3", "", "print(1)")),
            (Cmd{"/usr/bin/python3", "-u", "-c", "print(1)", "--epochs", "2"}));
  EXPECT_EQ(script_command(with("bash", "", "echo $1")),
            (Cmd{"/bin/bash", "-c", "echo $1", "muster-worker", "--epochs", "2"}));
  ::unlink(exe.c_str());
  ::unlink(plain.c_str());
  ::rmdir(dir.c_str());
}

// cdsw's `!` lines: a lone `!cmd` is a bash command (its exit code counts);
// in longer python3 code each `!` line runs in the shell, the rest is Python.
TEST(ScriptCommand, BangLinesRunInTheShell) {
  EXPECT_EQ(script_command(with("python3", "", "!echo hi && exit 3")),
            (Cmd{"/bin/bash", "-c", "echo hi && exit 3", "muster-worker", "--epochs", "2"}));
  EXPECT_EQ(script_command(with("python3", "", "  !ls")), (Cmd{"/bin/bash", "-c", "ls", "muster-worker", "--epochs", "2"}));
  EXPECT_EQ(script_command(with("python3", "", "print(1 != 2)")),
            (Cmd{"/usr/bin/python3", "-u", "-c", "print(1 != 2)", "--epochs", "2"}));
  const std::string mixed = "x = 1\n!echo \"a'b\" $((1+2))\nif x:\n    !echo in-block\nprint('py', x != 2)";
  const Cmd cmd = script_command(with("python3", "", mixed));
  ASSERT_EQ(cmd.size(), 6u);
  EXPECT_EQ(cmd[3], muster::api::python_with_shell_lines(mixed));
  // Run it for real: the shell lines run in order with the Python ones.
  const std::string file = "/tmp/muster-agent-bang-" + std::to_string(::getpid()) + ".py";
  std::ofstream(file) << cmd[3];
  FILE* p = ::popen(("/usr/bin/python3 " + file).c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string out;
  char buf[256];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
  EXPECT_EQ(::pclose(p), 0) << out;
  ::unlink(file.c_str());
  EXPECT_EQ(out, "a'b 3\nin-block\npy True\n");
}

TEST(HttpUrl, Parses) {
  auto e = muster::workers::agent::parse_http_url("http://10.1.2.3:7878");
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->host, "10.1.2.3");
  EXPECT_EQ(e->port, 7878);
  EXPECT_EQ(muster::workers::agent::parse_http_url("http://h/x")->port, 80);
  EXPECT_FALSE(muster::workers::agent::parse_http_url("https://h:1").has_value());
  EXPECT_FALSE(muster::workers::agent::parse_http_url("http://:1").has_value());
  EXPECT_FALSE(muster::workers::agent::parse_http_url("http://h:x").has_value());
}

TEST(Network, ReservedPort) {
  auto port = muster::workers::agent::ReservedPort::reserve("127.0.0.1");
  ASSERT_TRUE(port.has_value());
  EXPECT_GT(port->port(), 0);
  // While held, nobody else gets it (without SO_REUSEADDR)...
  auto try_bind = [&](int p) {
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(p));
    ::inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    const bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
    ::close(fd);
    return ok;
  };
  EXPECT_FALSE(try_bind(port->port()));
  // ...and once released the script can bind it.
  port->release();
  EXPECT_TRUE(try_bind(port->port()));
}

}  // namespace
