// muster-agent's pure parts: how a kernel and script become a command line,
// URL parsing, the route to the daemon, and port reservation.
#include "workers/agent/agent.h"

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>
#include <arpa/inet.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <mutex>
#include <thread>
#include <vector>

#include "api/kernel.h"
#include "workers/agent/http_client.h"
#include "workers/agent/network.h"

using muster::workers::agent::AgentOptions;
using muster::workers::agent::script_command;
using Cmd = std::vector<std::string>;
using namespace std::chrono_literals;

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

// The script starts in the project directory where this host has it, else
// in the worker's directory with a line saying why; an agent started by hand
// (no MUSTER_PROJECT_DIR) stays where it is, silently.
TEST(ScriptDirectory, TheProjectWhereItExists) {
  using muster::workers::agent::script_directory;
  const auto here = script_directory("/tmp", "/state/workers/ab12");
  EXPECT_EQ(here.path, "/tmp");
  EXPECT_EQ(here.note, "");
  const auto elsewhere = script_directory("/nonexistent/project", "/state/workers/ab12");
  EXPECT_EQ(elsewhere.path, "/state/workers/ab12");
  EXPECT_EQ(elsewhere.note,
            "the project directory /nonexistent/project is not on this host (No such file or directory); the script "
            "starts in the worker's directory /state/workers/ab12");
  const auto none = script_directory("", "/state/workers/ab12");
  EXPECT_EQ(none.path, "/state/workers/ab12");
  EXPECT_EQ(none.note, "");
}

TEST(HttpUrl, Parses) {
  auto e = muster::workers::agent::parse_http_url("http://10.1.2.3:7878");
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->host, "10.1.2.3");
  EXPECT_EQ(e->port, 7878);
  EXPECT_EQ(muster::workers::agent::parse_http_url("http://h/x")->port, 80);
  EXPECT_TRUE(muster::workers::agent::parse_http_url("https://h:1")->tls);
  EXPECT_FALSE(muster::workers::agent::parse_http_url("http://h:1")->tls);
  EXPECT_FALSE(muster::workers::agent::parse_http_url("ftp://h:1").has_value());
  EXPECT_FALSE(muster::workers::agent::parse_http_url("http://:1").has_value());
  EXPECT_FALSE(muster::workers::agent::parse_http_url("http://h:x").has_value());
}

// A daemon stand-in on 127.0.0.1: accepts connections one after another and
// answers each request 200 with a JSON body; `close_after` requests into a
// connection it closes that connection (the reply says so only when
// `announce_close`). Records what it saw.
class StubServer {
 public:
  StubServer(int close_after, bool announce_close) : close_after_(close_after), announce_close_(announce_close) {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    if (::bind(fd_, reinterpret_cast<sockaddr*>(&a), len) != 0 || ::listen(fd_, 8) != 0 ||
        ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
      ADD_FAILURE() << "stub server: " << std::strerror(errno);
    }
    port_ = ntohs(a.sin_port);
    thread_ = std::thread([this] { serve(); });
  }
  ~StubServer() {
    ::shutdown(fd_, SHUT_RDWR);
    thread_.join();
    ::close(fd_);
  }
  muster::workers::agent::Endpoint endpoint() const { return {"127.0.0.1", port_}; }
  int connections() const { return connections_; }
  std::vector<std::string> requests() {
    std::lock_guard<std::mutex> lock(mu_);
    return requests_;
  }

 private:
  void serve() {
    for (;;) {
      const int c = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (c < 0) return;
      ++connections_;
      std::string in;
      char buf[4096];
      for (int answered = 0;;) {
        const auto end = in.find("\r\n\r\n");
        if (end != std::string::npos) {
          const auto cl = in.find("Content-Length: ");
          const size_t body = cl < end ? std::stoul(in.substr(cl + 16)) : 0;
          if (in.size() >= end + 4 + body) {
            {
              std::lock_guard<std::mutex> lock(mu_);
              requests_.push_back(in.substr(0, end + 4 + body));
            }
            in.erase(0, end + 4 + body);
            const bool last = ++answered == close_after_;
            const std::string reply = std::string("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n") +
                                      (last && announce_close_ ? "Connection: close\r\n" : "") +
                                      "Content-Length: 11\r\n\r\n{\"n\": " + std::to_string(requests().size() % 10) + "   }";
            (void)!::send(c, reply.data(), reply.size(), MSG_NOSIGNAL);
            if (last) break;
            continue;
          }
        }
        const ssize_t n = ::recv(c, buf, sizeof buf, 0);
        if (n <= 0) break;
        in.append(buf, static_cast<size_t>(n));
      }
      ::close(c);
    }
  }

  int close_after_;
  bool announce_close_;
  int fd_ = -1;
  int port_ = 0;
  std::atomic<int> connections_{0};
  std::mutex mu_;
  std::vector<std::string> requests_;
  std::thread thread_;
};

// The heartbeats' connection stays open from call to call.
TEST(HttpConnection, KeepsOneConnectionAcrossCalls) {
  StubServer server(/*close_after=*/0, false);
  muster::workers::agent::HttpConnection kept(server.endpoint());
  for (int i = 0; i < 5; ++i) {
    auto r = kept.post("/api/v1/agent/workers/w/heartbeat", "tok", "{}", 5s);
    ASSERT_TRUE(r.has_value()) << "call " << i;
    EXPECT_EQ(r->status, 200);
    EXPECT_EQ(r->body.size(), 11u);
  }
  EXPECT_EQ(server.connections(), 1);
  const auto seen = server.requests();
  ASSERT_EQ(seen.size(), 5u);
  EXPECT_NE(seen[0].find("Authorization: Bearer tok"), std::string::npos) << seen[0];
  EXPECT_EQ(seen[0].find("Connection: close"), std::string::npos) << seen[0];
}

// A daemon that closes the kept connection while it is idle (its idle
// timeout, a restart) without saying so: the next call goes out again on a
// new connection, and no call fails for it.
TEST(HttpConnection, ReplacesAConnectionTheDaemonClosedWhileIdle) {
  StubServer server(/*close_after=*/1, /*announce_close=*/false);
  muster::workers::agent::HttpConnection kept(server.endpoint());
  for (int i = 0; i < 3; ++i) {
    auto r = kept.post("/x", "tok", "{\"i\": 1}", 5s);
    ASSERT_TRUE(r.has_value()) << "call " << i;
    EXPECT_EQ(r->status, 200);
    std::this_thread::sleep_for(50ms);  // the server's close lands while the connection idles
  }
  EXPECT_EQ(server.connections(), 3);
  EXPECT_EQ(server.requests().size(), 3u);  // each call made once on the connection that answered it
}

// "Connection: close" in a reply ends the connection on this side too; a
// one-off call (post_json) asks for it.
TEST(HttpConnection, HonoursConnectionClose) {
  StubServer server(/*close_after=*/2, /*announce_close=*/true);
  muster::workers::agent::HttpConnection kept(server.endpoint());
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(kept.post("/x", "tok", "{}", 5s).has_value()) << "call " << i;
  EXPECT_EQ(server.connections(), 2);
  auto once = muster::workers::agent::post_json(server.endpoint(), "/y", "tok", "{}", 5s);
  ASSERT_TRUE(once.has_value());
  EXPECT_NE(server.requests().back().find("Connection: close"), std::string::npos);
}

// Nobody listening: no reply, and the next call tries again.
TEST(HttpConnection, FailsWhenNobodyListens) {
  muster::workers::agent::Endpoint nowhere;
  {
    StubServer server(0, false);
    nowhere = server.endpoint();
  }
  muster::workers::agent::HttpConnection kept(nowhere);
  EXPECT_FALSE(kept.post("/x", "tok", "{}", 1s).has_value());
  EXPECT_FALSE(kept.post("/x", "tok", "{}", 1s).has_value());
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
