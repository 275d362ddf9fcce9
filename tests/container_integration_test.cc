// The container backend for real (root only): two containers with their own
// addresses and hostnames, a key-only sshd on 2222 in each, a link cut seen as
// lost, and nothing left behind after stop/shutdown or a crashed daemon.
// Every test uses its own bridge, subnet and name prefix, and TearDown removes
// whatever is left even when an assertion failed.
#include <gtest/gtest.h>
#include <unistd.h>

#include <thread>

#include "container_test_env.h"
#include "workers/container/container_backend.h"

namespace muster::workers::container {
namespace {
namespace fs = std::filesystem;
using namespace std::chrono_literals;
using test_env::slurp;

class ContainerIntegrationTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "needs root: creates network namespaces, veth pairs, a bridge and sshd";
    exec_ = make_system_executor();
    env_ = std::make_unique<test_env::TestContainers>("cit", 214);
    state_ = env_->state;
    options_ = env_->options;
    subnet_prefix_ = env_->subnet_prefix;
    options_.reap_interval = 0ms;  // the tests poll; ReaperRemoves... turns it on
  }

  void TearDown() override {
    if (geteuid() != 0) return;
    if (backend_) backend_->shutdown();
    backend_.reset();
    // Belt and braces: the ledger lists anything a failed test left.
    env_->remove_leftovers();
  }

  void start() {
    auto b = ContainerBackend::create(options_, make_system_executor());
    ASSERT_TRUE(b.is_ok()) << b.status().message();
    backend_ = std::move(b.value());
  }

  LaunchSpec sleeper(const std::string& id, const std::string& body = "sleep 60") {
    LaunchSpec s;
    s.worker_id = id;
    s.agent_argv = {"/bin/sh", "-c", "hostname; /usr/sbin/ip -o -4 addr show dev eth0; echo ready; " + body};
    s.env = {{"MUSTER_URL", "http://127.0.0.1:7878"}};
    s.working_dir = state_;
    s.log_path = state_ / (id + ".log");
    return s;
  }

  bool wait_for_log(const fs::path& log, const std::string& text, std::chrono::seconds limit = 10s) {
    auto deadline = std::chrono::steady_clock::now() + limit;
    while (std::chrono::steady_clock::now() < deadline) {
      if (slurp(log).find(text) != std::string::npos) return true;
      std::this_thread::sleep_for(50ms);
    }
    return false;
  }

  // ssh(1) to a container with extra options; returns (exit code, output).
  CommandResult ssh(const std::string& address, std::vector<std::string> extra, const std::string& command) {
    std::vector<std::string> argv{"/usr/bin/ssh"};
    for (const auto& o : backend_->ssh_options()) argv.push_back(o);
    argv.insert(argv.end(), {"-o", "ConnectTimeout=10"});
    argv.insert(argv.end(), extra.begin(), extra.end());
    argv.push_back(address);
    argv.push_back(command);
    return exec_->run(argv);
  }

  std::unique_ptr<Executor> exec_;
  std::unique_ptr<test_env::TestContainers> env_;
  fs::path state_;
  ContainerOptions options_;
  std::string subnet_prefix_;
  std::unique_ptr<ContainerBackend> backend_;
};

TEST_F(ContainerIntegrationTest, TwoContainersOwnAddressHostnameAndKeyOnlySshd) {
  start();
  ASSERT_TRUE(backend_);
  ASSERT_TRUE(backend_->launch({sleeper("w-a"), sleeper("w-b")}).is_ok());
  std::string a = backend_->address_of("w-a"), b = backend_->address_of("w-b");
  EXPECT_NE(a, b);
  EXPECT_EQ(a.rfind(subnet_prefix_, 0), 0u) << a;
  EXPECT_EQ(b.rfind(subnet_prefix_, 0), 0u) << b;

  ASSERT_TRUE(wait_for_log(state_ / "w-a.log", "ready")) << slurp(state_ / "w-a.log");
  ASSERT_TRUE(wait_for_log(state_ / "w-b.log", "ready")) << slurp(state_ / "w-b.log");
  std::string log_a = slurp(state_ / "w-a.log");
  EXPECT_EQ(log_a.rfind("w-a\n", 0), 0u) << "own hostname: " << log_a;
  EXPECT_NE(log_a.find("inet " + a + "/24"), std::string::npos) << log_a;
  EXPECT_NE(slurp(state_ / "w-b.log").find("inet " + b + "/24"), std::string::npos);
  EXPECT_EQ(backend_->poll("w-a").state, ProcessState::kRunning);

  // The generated key logs in, sees the container's hostname and address.
  CommandResult r = ssh(b, {}, "hostname; /usr/sbin/ip -o -4 addr show dev eth0");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("w-b"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("inet " + b + "/"), std::string::npos) << r.output;

  // Passwords are refused: the server offers public keys only.
  CommandResult pw = ssh(a, {"-o", "PubkeyAuthentication=no", "-o",
                             "PreferredAuthentications=password,keyboard-interactive"},
                         "true");
  EXPECT_EQ(pw.exit_code, 255) << pw.output;
  EXPECT_NE(pw.output.find("Permission denied (publickey)"), std::string::npos) << pw.output;

  // Another key is refused too.
  CommandResult k = exec_->run({"/usr/bin/ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f",
                                (state_ / "otherkey").string()});
  ASSERT_EQ(k.exit_code, 0) << k.output;
  // A key the backend did not generate is refused.
  std::vector<std::string> argv{"/usr/bin/ssh", "-p", "2222", "-i", (state_ / "otherkey").string(),
                                "-o", "IdentitiesOnly=yes", "-o", "BatchMode=yes",
                                "-o", "UserKnownHostsFile=" + backend_->ssh_keys().known_hosts.string(),
                                "-o", "StrictHostKeyChecking=yes", "-l", "root", a, "true"};
  CommandResult foreign = exec_->run(argv);
  EXPECT_EQ(foreign.exit_code, 255) << foreign.output;

  // Stop removes the namespace, the link and sshd.
  std::string ns = backend_->netns_of("w-a"), link = backend_->host_link_of("w-a");
  ASSERT_FALSE(ns.empty());
  std::string sshd_pid = slurp(state_ / "container" / ns / "sshd.pid");
  ASSERT_FALSE(sshd_pid.empty());
  ASSERT_TRUE(backend_->stop("w-a", 500ms).is_ok());
  // stop() returns once the tree is signalled; the teardown follows on the
  // backend's own thread (the grace, then the namespace, link and sshd).
  const auto gone_by = std::chrono::steady_clock::now() + 30s;
  while (std::chrono::steady_clock::now() < gone_by &&
         (fs::exists("/run/netns/" + ns) || fs::exists("/sys/class/net/" + link) ||
          fs::exists("/proc/" + std::to_string(std::stoi(sshd_pid))))) {
    std::this_thread::sleep_for(50ms);
  }
  EXPECT_FALSE(fs::exists("/run/netns/" + ns));
  EXPECT_FALSE(fs::exists("/sys/class/net/" + link));
  EXPECT_FALSE(fs::exists("/proc/" + std::to_string(std::stoi(sshd_pid))))
      << "sshd " << sshd_pid << " still runs";
  EXPECT_EQ(backend_->poll("w-a").state, ProcessState::kExited);
  EXPECT_EQ(backend_->poll("w-b").state, ProcessState::kRunning);

  // Shutdown removes the rest, bridge included.
  std::string ns_b = backend_->netns_of("w-b");
  backend_->shutdown();
  EXPECT_FALSE(fs::exists("/run/netns/" + ns_b));
  EXPECT_FALSE(fs::exists("/sys/class/net/" + options_.bridge));
}

TEST_F(ContainerIntegrationTest, AgentExitIsReportedAndTornDown) {
  start();
  ASSERT_TRUE(backend_);
  ASSERT_TRUE(backend_->launch({sleeper("w-x", "exit 3")}).is_ok());
  std::string ns = backend_->netns_of("w-x");
  ProcessStatus st;
  for (int i = 0; i < 200; ++i) {
    st = backend_->poll("w-x");
    if (st.state != ProcessState::kRunning) break;
    std::this_thread::sleep_for(50ms);
  }
  EXPECT_EQ(st.state, ProcessState::kExited);
  EXPECT_EQ(st.exit_code, 3);
  EXPECT_FALSE(fs::exists("/run/netns/" + ns));
}

TEST_F(ContainerIntegrationTest, ReaperRemovesAnExitedContainerUnasked) {
  options_.reap_interval = 100ms;
  start();
  ASSERT_TRUE(backend_);
  ASSERT_TRUE(backend_->launch({sleeper("w-r", "exit 0")}).is_ok());
  std::string ns = backend_->netns_of("w-r");
  ASSERT_FALSE(ns.empty());
  for (int i = 0; i < 200 && fs::exists("/run/netns/" + ns); ++i) std::this_thread::sleep_for(50ms);
  EXPECT_FALSE(fs::exists("/run/netns/" + ns)) << "no poll() was called; the reaper tore it down";
  EXPECT_EQ(backend_->poll("w-r").state, ProcessState::kExited);
}

TEST_F(ContainerIntegrationTest, CutLinkIsLost) {
  start();
  ASSERT_TRUE(backend_);
  ASSERT_TRUE(backend_->launch({sleeper("w-c")}).is_ok());
  EXPECT_EQ(backend_->poll("w-c").state, ProcessState::kRunning);
  CommandResult r = exec_->run({"/usr/sbin/ip", "-n", backend_->netns_of("w-c"), "link", "set", "eth0", "down"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  ProcessState state = ProcessState::kRunning;
  for (int i = 0; i < 100 && state == ProcessState::kRunning; ++i) {
    state = backend_->poll("w-c").state;
    if (state == ProcessState::kRunning) std::this_thread::sleep_for(50ms);
  }
  EXPECT_EQ(state, ProcessState::kLost);
}

TEST_F(ContainerIntegrationTest, RestartAfterCrashRemovesLeftovers) {
  // A "crashed" daemon: resources recorded in the ledger, never removed.
  fs::create_directories(state_ / "container");
  std::string ns = options_.prefix + options_.instance_id + "-old";
  {
    Ledger ledger(state_ / "container" / "ledger");
    ledger.add(ResourceKind::kNetns, ns);
  }
  ASSERT_EQ(exec_->run({"/usr/sbin/ip", "netns", "add", ns}).exit_code, 0);
  SpawnSpec stray;
  stray.argv = {"/bin/sleep", "60"};
  stray.netns = ns;
  auto pid = exec_->spawn(stray);
  ASSERT_TRUE(pid.is_ok());
  start();
  ASSERT_TRUE(backend_);
  EXPECT_FALSE(fs::exists("/run/netns/" + ns));
  std::optional<int> code;
  for (int i = 0; i < 100 && !code; ++i) {
    code = exec_->try_wait(pid.value());
    if (!code) std::this_thread::sleep_for(20ms);
  }
  EXPECT_EQ(code, 128 + 9) << "the stray process in the old namespace was killed";
}

}  // namespace
}  // namespace muster::workers::container
