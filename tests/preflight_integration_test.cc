// Preflight against real sshd in containers (root only): a good set of hosts
// yields --prefix and the interface; a container whose sshd is down fails the
// preflight, named, before anything is launched.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <fstream>
#include <thread>

#include "container_test_env.h"
#include "workers/container/container_backend.h"
#include "workers/remote/preflight.h"

namespace muster::workers::remote {
namespace {
namespace fs = std::filesystem;
using namespace std::chrono_literals;
using container::ContainerBackend;

class PreflightIntegrationTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "needs root: the hosts are network-namespace containers";
    env_ = std::make_unique<container::test_env::TestContainers>("pit", 217);
    state_ = env_->state;
    container::ContainerOptions o = env_->options;
    o.reap_interval = 0ms;
    auto c = ContainerBackend::create(o, container::make_system_executor());
    ASSERT_TRUE(c.is_ok()) << c.status().message();
    containers_ = std::move(c.value());
    std::vector<LaunchSpec> hosts;
    for (const char* id : {"h1", "h2", "h3"}) {
      LaunchSpec s;
      s.worker_id = id;
      s.agent_argv = {"/bin/sleep", "300"};
      hosts.push_back(s);
    }
    ASSERT_TRUE(containers_->launch(hosts).is_ok());
  }
  void TearDown() override {
    if (geteuid() != 0) return;
    if (containers_) containers_->shutdown();
    containers_.reset();
    env_->remove_leftovers();
  }
  PreflightOptions options() {
    PreflightOptions p;
    for (const char* id : {"h1", "h2", "h3"}) {
      Host h;
      h.address = containers_->address_of(id);
      h.port = containers_->ssh_port();
      h.user = "root";
      h.identity_file = containers_->ssh_keys().client_key;
      p.hosts.push_back(h);
    }
    p.program = "sh";
    return p;
  }
  std::unique_ptr<Connector> connector() {
    ConnectOptions c;
    c.known_hosts = containers_->ssh_keys().known_hosts;
    c.timeout = 30s;  // the probe runs root's startup files (pyenv init: seconds under load)
    return make_libssh2_connector(c);
  }

  std::unique_ptr<container::test_env::TestContainers> env_;
  fs::path state_;
  std::unique_ptr<ContainerBackend> containers_;
};

TEST_F(PreflightIntegrationTest, GoodHostsGiveLaunchLineValues) {
  PreflightReport r = run_preflight(*connector(), options());
  ASSERT_TRUE(r.ok) << r.summary();
  EXPECT_EQ(r.interfaces, "eth0");
  EXPECT_EQ(r.prefix, "/usr") << "Debian's orted is /usr/bin/orted";
  for (const auto& h : r.hosts) {
    EXPECT_EQ(h.found.at("orted"), "/usr/bin/orted");
    EXPECT_FALSE(h.found.at("mpirun").empty());
    EXPECT_EQ(h.interface, "eth0");
  }
}

TEST_F(PreflightIntegrationTest, SshdDownFailsNamingTheHost) {
  std::string ns = containers_->netns_of("h2");
  std::ifstream pid_file(state_ / "container" / ns / "sshd.pid");
  long pid = 0;
  ASSERT_TRUE(pid_file >> pid);
  ASSERT_EQ(::kill(static_cast<pid_t>(pid), SIGTERM), 0);
  // sshd removes its pid file on exit; wait for the port to close.
  for (int i = 0; i < 100 && fs::exists(state_ / "container" / ns / "sshd.pid"); ++i) std::this_thread::sleep_for(20ms);
  PreflightOptions o = options();
  PreflightReport r = run_preflight(*connector(), o);
  EXPECT_FALSE(r.ok);
  ASSERT_EQ(r.hosts.size(), 3u);
  EXPECT_TRUE(r.hosts[0].ok) << r.summary();
  EXPECT_FALSE(r.hosts[1].ok);
  EXPECT_TRUE(r.hosts[2].ok) << r.summary();
  std::string s = r.summary();
  EXPECT_NE(s.find(o.hosts[1].label() + ": unreachable over SSH"), std::string::npos) << s;
  EXPECT_NE(s.find("Connection refused"), std::string::npos) << s;
}

TEST_F(PreflightIntegrationTest, MissingProgramOnThePathIsReported) {
  PreflightOptions o = options();
  o.program = "no-such-trainer-xyz";
  PreflightReport r = run_preflight(*connector(), o);
  EXPECT_FALSE(r.ok);
  EXPECT_NE(r.summary().find("no-such-trainer-xyz not found on the non-interactive PATH"), std::string::npos)
      << r.summary();
}

}  // namespace
}  // namespace muster::workers::remote
