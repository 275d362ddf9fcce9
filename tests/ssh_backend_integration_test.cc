// The SSH backend against real sshd: two containers of the container backend
// stand in for remote hosts (own IPs, sshd on 2222, generated key). Root only.
// Launch with streamed logs, exit codes, stop killing the process group,
// agent copy over SFTP, strict and accept-new host keys, a cut link = lost.
#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <thread>

#include "container_test_env.h"
#include "workers/container/container_backend.h"
#include "workers/ssh/ssh_backend.h"

namespace muster::workers::ssh {
namespace {
namespace fs = std::filesystem;
using namespace std::chrono_literals;
using container::ContainerBackend;
using container::ContainerOptions;

using container::test_env::slurp;

class SshBackendIntegrationTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "needs root: the remote hosts are network-namespace containers";
    env_ = std::make_unique<container::test_env::TestContainers>("sit", 215);
    state_ = env_->state;
    ContainerOptions o = env_->options;
    auto c = ContainerBackend::create(o, container::make_system_executor());
    ASSERT_TRUE(c.is_ok()) << c.status().message();
    containers_ = std::move(c.value());
    std::vector<LaunchSpec> hosts;
    for (const char* id : {"host1", "host2"}) {
      LaunchSpec s;
      s.worker_id = id;
      s.agent_argv = {"/bin/sleep", "300"};
      s.log_path = state_ / (std::string(id) + ".log");
      hosts.push_back(s);
    }
    ASSERT_TRUE(containers_->launch(hosts).is_ok());
  }

  void TearDown() override {
    if (geteuid() != 0) return;
    if (ssh_) ssh_->shutdown();
    ssh_.reset();
    if (containers_) containers_->shutdown();
    containers_.reset();
    env_->remove_leftovers();
  }

  Host host(const std::string& container_id) {
    Host h;
    h.address = containers_->address_of(container_id);
    h.port = containers_->ssh_port();
    h.user = "root";
    h.identity_file = containers_->ssh_keys().client_key;
    h.slots = 1;
    return h;
  }

  SshOptions options() {
    SshOptions o;
    o.teardown_threads = 0;  // a stop's teardown runs before stop() returns
    o.hosts = {host("host1"), host("host2")};
    o.known_hosts = containers_->ssh_keys().known_hosts;  // strict checking against the generated host key
    o.connect_timeout = 10s;
    o.dead_after = 2000ms;
    return o;
  }

  void start(SshOptions o) {
    auto b = SshBackend::create(std::move(o), make_libssh2_connector(options().connect_options()));
    ASSERT_TRUE(b.is_ok()) << b.status().message();
    ssh_ = std::move(b.value());
  }

  // A worker for `backend` (the fixture's own by default) whose agent is a
  // shell script; MUSTER_URL names the daemon address the backend reports.
  LaunchSpec worker(const std::string& id, const std::string& script, const SshBackend* backend = nullptr) {
    const SshBackend& via = backend ? *backend : *ssh_;
    LaunchSpec s;
    s.worker_id = id;
    s.agent_argv = {"/bin/sh", "-c", script};
    s.env = {{"MUSTER_URL", "http://" + via.master_address() + ":7878"}, {"GREETING", "it's quoted"}};
    s.working_dir = state_;
    s.log_path = state_ / (id + ".log");
    return s;
  }

  ProcessStatus wait_not_running(const std::string& id, std::chrono::seconds limit) {
    auto deadline = std::chrono::steady_clock::now() + limit;
    ProcessStatus st = ssh_->poll(id);
    while (st.state == ProcessState::kRunning && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(50ms);
      st = ssh_->poll(id);
    }
    return st;
  }

  bool wait_for_log(const fs::path& log, const std::string& text, std::chrono::seconds limit = 10s) {
    auto deadline = std::chrono::steady_clock::now() + limit;
    while (std::chrono::steady_clock::now() < deadline) {
      if (slurp(log).find(text) != std::string::npos) return true;
      std::this_thread::sleep_for(50ms);
    }
    return false;
  }

  std::unique_ptr<container::test_env::TestContainers> env_;
  fs::path state_;
  std::unique_ptr<ContainerBackend> containers_;
  std::unique_ptr<SshBackend> ssh_;
};

TEST_F(SshBackendIntegrationTest, LaunchStreamsLogsAndStopKillsTheGroup) {
  start(options());
  ASSERT_TRUE(ssh_);
  ASSERT_TRUE(ssh_->launch({worker("a", "echo \"pid $$ on $(hostname) url $MUSTER_URL greet $GREETING\"; "
                                        "echo to-stderr >&2; sleep 300 & wait"),
                            worker("b", "echo b on $(hostname); sleep 300")})
                  .is_ok());
  // Placed one per host (one slot each).
  ASSERT_NE(ssh_->host_of("a"), nullptr);
  ASSERT_NE(ssh_->host_of("b"), nullptr);
  EXPECT_NE(ssh_->host_of("a")->address, ssh_->host_of("b")->address);

  fs::path log = state_ / "a.log";
  ASSERT_TRUE(wait_for_log(log, "to-stderr")) << slurp(log);
  std::string text = slurp(log);
  EXPECT_NE(text.find("on host1"), std::string::npos) << text;
  EXPECT_NE(text.find("url http://" + ssh_->master_address() + ":7878"), std::string::npos) << text;
  EXPECT_EQ(ssh_->master_address(), containers_->master_address());
  EXPECT_NE(text.find("greet it's quoted"), std::string::npos) << text;
  ASSERT_TRUE(wait_for_log(state_ / "b.log", "b on host2")) << slurp(state_ / "b.log");
  EXPECT_EQ(ssh_->poll("a").state, ProcessState::kRunning);

  // A third worker finds no free slot: nothing is started.
  api::Status full = ssh_->launch({worker("c", "true")});
  EXPECT_EQ(full.code(), api::ErrorCode::kUnavailable);

  long pid = std::stol(text.substr(text.find("pid ") + 4));
  ASSERT_TRUE(fs::exists("/proc/" + std::to_string(pid)));  // containers share the pid namespace
  ASSERT_TRUE(ssh_->stop("a", 2000ms).is_ok());
  ProcessStatus st = ssh_->poll("a");
  EXPECT_EQ(st.state, ProcessState::kExited);
  EXPECT_EQ(st.exit_code, 128 + SIGTERM);
  for (int i = 0; i < 100 && fs::exists("/proc/" + std::to_string(pid)); ++i) std::this_thread::sleep_for(20ms);
  EXPECT_FALSE(fs::exists("/proc/" + std::to_string(pid))) << "the agent's process group was signalled";
  // Its slot is free again.
  api::Status again = ssh_->launch({worker("c", "exit 7")});
  ASSERT_TRUE(again.is_ok()) << again.message();
  ProcessStatus c = wait_not_running("c", 20s);
  EXPECT_EQ(c.state, ProcessState::kExited);
  EXPECT_EQ(c.exit_code, 7);
}

// stop() returns once the worker is signalled; its slot comes back when the
// teardown has seen it end. A launch made meanwhile onto a full inventory
// waits for that slot instead of failing "every host is full".
TEST_F(SshBackendIntegrationTest, ALaunchWaitsForTheSlotOfAWorkerBeingStopped) {
  SshOptions o = options();
  o.teardown_threads = 1;  // as musterd runs it: stops end in the background
  start(std::move(o));
  ASSERT_TRUE(ssh_);
  // "a" ignores SIGTERM, so its teardown waits out the grace and SIGKILLs it.
  ASSERT_TRUE(ssh_->launch({worker("a", "trap '' TERM; echo a up; sleep 300"), worker("b", "sleep 300")}).is_ok());
  ASSERT_TRUE(wait_for_log(state_ / "a.log", "a up")) << slurp(state_ / "a.log");
  const std::string host_a = ssh_->host_of("a")->address;
  const auto t0 = std::chrono::steady_clock::now();
  ASSERT_TRUE(ssh_->stop("a", 1000ms).is_ok());
  api::Status c = ssh_->launch({worker("c", "exit 3")});
  const auto waited = std::chrono::steady_clock::now() - t0;
  ASSERT_TRUE(c.is_ok()) << c.message();
  EXPECT_GE(waited, 900ms) << "the launch waited for a's grace and its end";
  ASSERT_NE(ssh_->host_of("c"), nullptr);
  EXPECT_EQ(ssh_->host_of("c")->address, host_a);
  ProcessStatus st = wait_not_running("c", 20s);
  EXPECT_EQ(st.exit_code, 3);
  // (With nothing being stopped a full inventory fails at once: the test above.)
}

TEST_F(SshBackendIntegrationTest, CopiesTheAgentOverSftpWhenMissing) {
  fs::path local_agent = state_ / "fake-agent.sh";
  std::ofstream(local_agent) << "#!/bin/sh\necho copied agent ran with $1\n";
  fs::permissions(local_agent, fs::perms::owner_all);
  SshOptions o = options();
  o.agent_path = (state_ / "remote" / "bin" / "muster-agent").string();
  start(o);
  ASSERT_TRUE(ssh_);
  LaunchSpec s = worker("a", "");
  s.agent_argv = {local_agent.string(), "--flag"};
  api::Status launched = ssh_->launch({s});
  ASSERT_TRUE(launched.is_ok()) << launched.message();
  ProcessStatus st = wait_not_running("a", 20s);
  EXPECT_EQ(st.state, ProcessState::kExited);
  EXPECT_EQ(st.exit_code, 0);
  EXPECT_NE(slurp(s.log_path).find("copied agent ran with --flag"), std::string::npos) << slurp(s.log_path);
  EXPECT_TRUE(fs::exists(o.agent_path));
}

TEST_F(SshBackendIntegrationTest, UnknownHostKeyRefusedUnlessAcceptNew) {
  SshOptions o = options();
  o.known_hosts = state_ / "empty_known_hosts";
  {
    auto b = SshBackend::create(o, make_libssh2_connector(o.connect_options()));
    ASSERT_TRUE(b.is_ok());
    api::Status s = b.value()->launch({worker("a", "true", b.value().get())});
    EXPECT_EQ(s.code(), api::ErrorCode::kUnavailable);
    EXPECT_NE(s.message().find("not in known_hosts"), std::string::npos) << s.message();
    EXPECT_NE(s.message().find("worker a"), std::string::npos) << s.message();
  }
  o.accept_new = true;
  auto b = SshBackend::create(o, make_libssh2_connector(o.connect_options()));
  ASSERT_TRUE(b.is_ok());
  api::Status launched = b.value()->launch({worker("a", "true", b.value().get())});
  ASSERT_TRUE(launched.is_ok()) << launched.message();
  std::string kh = slurp(o.known_hosts);
  EXPECT_NE(kh.find("[" + host("host1").address + "]:2222 ssh-ed25519"), std::string::npos) << kh;
  b.value()->shutdown();
}

TEST_F(SshBackendIntegrationTest, CutLinkMarksTheWorkerLost) {
  start(options());
  ASSERT_TRUE(ssh_);
  ASSERT_TRUE(ssh_->launch({worker("a", "echo up; sleep 300")}).is_ok());
  ASSERT_TRUE(wait_for_log(state_ / "a.log", "up"));
  std::string netns = containers_->netns_of(ssh_->host_of("a")->address == host("host1").address ? "host1" : "host2");
  auto exec = container::make_system_executor();
  ASSERT_EQ(exec->run({"/usr/sbin/ip", "-n", netns, "link", "set", "eth0", "down"}).exit_code, 0);
  ProcessStatus st = wait_not_running("a", 30s);
  EXPECT_EQ(st.state, ProcessState::kLost);
  EXPECT_NE(slurp(state_ / "a.log").find("lost the connection"), std::string::npos);
}

}  // namespace
}  // namespace muster::workers::ssh
