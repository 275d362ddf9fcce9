// Unit tests of the container backend against a fake Executor: which `ip`
// commands it issues, the addresses it hands out, all-or-nothing launch,
// teardown on stop, leftover cleanup, and refusal without root. Nothing forks.
#include <gtest/gtest.h>

#include <algorithm>
#include <csignal>
#include <fstream>
#include <mutex>
#include <set>

#include "workers/container/container_backend.h"
#include "workers/container/net_resources.h"

namespace muster::workers::container {
namespace {
namespace fs = std::filesystem;

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& a : v) s += (s.empty() ? "" : " ") + a;
  return s;
}

class FakeExecutor : public Executor {
 public:
  struct Shared {
    std::mutex mu;
    std::vector<std::string> commands;
    std::vector<SpawnSpec> spawns;
    std::vector<std::pair<pid_t, int>> signals;  // (pid or -pgid, signal)
    std::set<pid_t> exited;
    std::map<std::string, std::string> files;
    std::string fail_on;  // a command containing this substring fails
    bool root = true;
    pid_t next_pid = 1000;
  };
  explicit FakeExecutor(std::shared_ptr<Shared> s) : s_(std::move(s)) {}

  CommandResult run(const std::vector<std::string>& argv) override {
    std::lock_guard<std::mutex> lock(s_->mu);
    std::string cmd = join(argv);
    s_->commands.push_back(cmd);
    if (!s_->fail_on.empty() && cmd.find(s_->fail_on) != std::string::npos) return {2, "RTNETLINK answers: boom"};
    if (argv[0] == "/usr/bin/ssh-keygen") {
      std::string key = argv.back();
      std::ofstream(key) << "private";
      std::ofstream(key + ".pub") << "ssh-ed25519 AAAAfake muster-container\n";
    }
    return {0, ""};
  }
  api::Result<pid_t> spawn(const SpawnSpec& spec) override {
    std::lock_guard<std::mutex> lock(s_->mu);
    s_->spawns.push_back(spec);
    pid_t pid = s_->next_pid++;
    // Every spawned sshd "listens" at once.
    s_->files["/proc/" + std::to_string(pid) + "/net/tcp"] =
        "  sl  local_address rem_address   st\n   0: 0202D50A:08AE 00000000:0000 0A 0\n";
    return pid;
  }
  std::optional<int> try_wait(pid_t pid) override {
    std::lock_guard<std::mutex> lock(s_->mu);
    if (s_->exited.count(pid)) return 0;
    return std::nullopt;
  }
  void kill_group(pid_t pgid, int signal) override {
    std::lock_guard<std::mutex> lock(s_->mu);
    s_->signals.push_back({-pgid, signal});
    s_->exited.insert(pgid);  // the fake process obeys at once
  }
  void kill_process(pid_t pid, int signal) override {
    std::lock_guard<std::mutex> lock(s_->mu);
    s_->signals.push_back({pid, signal});
    s_->exited.insert(pid);
  }
  bool process_alive(pid_t pid) override {
    std::lock_guard<std::mutex> lock(s_->mu);
    return !s_->exited.count(pid);
  }
  std::string read_file(const fs::path& path) override {
    std::lock_guard<std::mutex> lock(s_->mu);
    auto it = s_->files.find(path.string());
    return it == s_->files.end() ? std::string() : it->second;
  }
  void sleep_for(std::chrono::milliseconds) override {}
  bool is_root() override { return s_->root; }

 private:
  std::shared_ptr<Shared> s_;
};

class ContainerBackendTest : public ::testing::Test {
 protected:
  void SetUp() override {
    state_ = fs::temp_directory_path() / ("muster-ctest-" + std::to_string(::getpid()) + "-" +
                                          ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(state_);
    fs::create_directories(state_);
    shared_ = std::make_shared<FakeExecutor::Shared>();
    options_.state_dir = state_;
    options_.bridge = "mtest0";
    options_.instance_id = "ab12";
    options_.reap_interval = std::chrono::milliseconds(0);  // tests drive poll() themselves
    options_.teardown_threads = 0;  // a stop's teardown runs before stop() returns
  }
  void TearDown() override { fs::remove_all(state_); }

  std::unique_ptr<ContainerBackend> make() {
    auto b = ContainerBackend::create(options_, std::make_unique<FakeExecutor>(shared_));
    EXPECT_TRUE(b.is_ok()) << b.status().message();
    return b.is_ok() ? std::move(b.value()) : nullptr;
  }
  static LaunchSpec spec(const std::string& id) {
    LaunchSpec s;
    s.worker_id = id;
    s.agent_argv = {"/opt/muster-agent", "--x"};
    // As the registry builds it: MUSTER_URL names the backend's master address.
    s.env = {{"MUSTER_URL", "http://10.213.0.1:7878"}, {"MUSTER_MASTER_IP", "10.213.0.1"}, {"MUSTER_WORKER_ID", id}};
    s.log_path = "/tmp/none.log";
    return s;
  }
  bool issued(const std::string& cmd) {
    return std::find(shared_->commands.begin(), shared_->commands.end(), cmd) != shared_->commands.end();
  }

  fs::path state_;
  std::shared_ptr<FakeExecutor::Shared> shared_;
  ContainerOptions options_;
};

TEST_F(ContainerBackendTest, RefusesWithoutRootSayingWhy) {
  shared_->root = false;
  auto b = ContainerBackend::create(options_, std::make_unique<FakeExecutor>(shared_));
  ASSERT_FALSE(b.is_ok());
  EXPECT_EQ(b.status().code(), api::ErrorCode::kUnavailable);
  EXPECT_NE(b.status().message().find("needs root"), std::string::npos);
  EXPECT_TRUE(shared_->commands.empty()) << "nothing may be created without root";
}

TEST_F(ContainerBackendTest, CreatesBridgeAndKeys) {
  auto b = make();
  ASSERT_TRUE(b);
  EXPECT_EQ(b->master_address(), "10.213.0.1");
  EXPECT_TRUE(issued("/usr/sbin/ip link add mtest0 type bridge"));
  EXPECT_TRUE(issued("/usr/sbin/ip addr add 10.213.0.1/24 dev mtest0"));
  // A fixed MAC: otherwise the bridge takes its lowest port's, which changes
  // as containers come and go.
  const std::string mac = bridge_mac("mtest0");
  EXPECT_TRUE(issued("/usr/sbin/ip link set mtest0 address " + mac));
  EXPECT_EQ(mac.size(), 17u);
  EXPECT_EQ(mac.substr(0, 3), "02:") << "locally administered, unicast";
  EXPECT_EQ(bridge_mac("mtest0"), mac);
  EXPECT_NE(bridge_mac("mtest1"), mac);
  EXPECT_TRUE(fs::exists(state_ / "container" / "ssh" / "authorized_keys"));
  EXPECT_NE(b->mpi_rsh_agent().find("UserKnownHostsFile=" + (state_ / "container" / "ssh" / "known_hosts").string()),
            std::string::npos);
  auto opts = join(b->ssh_options());
  EXPECT_NE(opts.find("-p 2222"), std::string::npos);
  EXPECT_NE(opts.find("StrictHostKeyChecking=yes"), std::string::npos);
}

TEST_F(ContainerBackendTest, LaunchGivesEachWorkerItsNamespaceAddressAndSshd) {
  auto b = make();
  ASSERT_TRUE(b);
  ASSERT_TRUE(b->launch({spec("w1"), spec("w2")}).is_ok());
  EXPECT_TRUE(issued("/usr/sbin/ip netns add mstab12-2"));
  EXPECT_TRUE(issued("/usr/sbin/ip link add mstab12v2 type veth peer name mstab12v2p netns mstab12-2"));
  EXPECT_TRUE(issued("/usr/sbin/ip link set mstab12v2 master mtest0 up"));
  EXPECT_TRUE(issued("/usr/sbin/ip -n mstab12-2 addr add 10.213.0.2/24 dev eth0"));
  EXPECT_TRUE(issued("/usr/sbin/ip -n mstab12-3 addr add 10.213.0.3/24 dev eth0"));
  EXPECT_TRUE(issued("/usr/sbin/ip -n mstab12-3 route add default via 10.213.0.1"));
  EXPECT_EQ(b->address_of("w1"), "10.213.0.2");
  EXPECT_EQ(b->address_of("w2"), "10.213.0.3");

  // sshd then agent per worker; the agent joins sshd's UTS namespace.
  ASSERT_EQ(shared_->spawns.size(), 4u);
  const SpawnSpec& sshd = shared_->spawns[0];
  EXPECT_EQ(sshd.argv[0], "/usr/sbin/sshd");
  EXPECT_EQ(sshd.netns, "mstab12-2");
  EXPECT_EQ(sshd.new_hostname, "w1");
  const SpawnSpec& agent = shared_->spawns[1];
  EXPECT_EQ(agent.argv, spec("w1").agent_argv);
  EXPECT_EQ(agent.netns, "mstab12-2");
  EXPECT_EQ(agent.join_uts_of, 1000);
  EXPECT_EQ(agent.env.at("MUSTER_URL"), "http://10.213.0.1:7878");
  EXPECT_EQ(agent.env.at("MUSTER_MASTER_IP"), "10.213.0.1");

  std::string config;
  {
    std::ifstream in(state_ / "container" / "mstab12-2" / "sshd_config");
    config.assign(std::istreambuf_iterator<char>(in), {});
  }
  EXPECT_NE(config.find("PasswordAuthentication no"), std::string::npos);
  EXPECT_NE(config.find("PermitRootLogin prohibit-password"), std::string::npos);
  EXPECT_NE(config.find("ListenAddress 10.213.0.2"), std::string::npos);

  std::string known;
  {
    std::ifstream in(b->ssh_keys().known_hosts);
    known.assign(std::istreambuf_iterator<char>(in), {});
  }
  EXPECT_NE(known.find("[10.213.0.2]:2222 ssh-ed25519 AAAAfake"), std::string::npos);
  EXPECT_NE(known.find("[10.213.0.3]:2222 ssh-ed25519 AAAAfake"), std::string::npos);
}

TEST_F(ContainerBackendTest, FailedLaunchRemovesWhatItBuilt) {
  auto b = make();
  ASSERT_TRUE(b);
  shared_->fail_on = "addr add 10.213.0.3/24";
  api::Status s = b->launch({spec("w1"), spec("w2")});
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("worker w2"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("boom"), std::string::npos) << s.message();
  EXPECT_TRUE(issued("/usr/sbin/ip netns delete mstab12-2"));
  EXPECT_TRUE(issued("/usr/sbin/ip netns delete mstab12-3"));
  EXPECT_TRUE(issued("/usr/sbin/ip link delete mstab12v2"));
  EXPECT_EQ(b->address_of("w1"), "");
  // The first worker's agent was killed.
  EXPECT_NE(std::find(shared_->signals.begin(), shared_->signals.end(), std::make_pair(pid_t(-1001), SIGTERM)),
            shared_->signals.end());
  // The addresses are free again.
  shared_->fail_on.clear();
  ASSERT_TRUE(b->launch({spec("w3")}).is_ok());
  EXPECT_EQ(b->address_of("w3"), "10.213.0.2");
}

// An address just freed is handed out again only after the rest of the
// subnet: the host still holds TIME_WAIT sockets and a neighbour entry for
// the container that had it.
TEST_F(ContainerBackendTest, AddressesGoRoundTheSubnetBeforeReuse) {
  auto b = make();
  ASSERT_TRUE(b);
  ASSERT_TRUE(b->launch({spec("w1"), spec("w2")}).is_ok());
  ASSERT_TRUE(b->stop("w1", std::chrono::milliseconds(0)).is_ok());
  ASSERT_TRUE(b->launch({spec("w3")}).is_ok());
  EXPECT_EQ(b->address_of("w3"), "10.213.0.4") << "not w1's freed 10.213.0.2";
  EXPECT_EQ(b->launch({spec("w3")}).code(), api::ErrorCode::kConflict);
  ASSERT_TRUE(b->launch({spec("w4")}).is_ok()) << "a refused launch keeps no address";
  EXPECT_EQ(b->address_of("w4"), "10.213.0.5");
}

TEST_F(ContainerBackendTest, AddressesWrapAroundAFullSubnet) {
  options_.subnet = "10.213.0.0/29";  // .2 to .6: five containers
  auto b = make();
  ASSERT_TRUE(b);
  ASSERT_TRUE(b->launch({spec("a"), spec("b"), spec("c"), spec("d"), spec("e")}).is_ok());
  EXPECT_EQ(b->launch({spec("f")}).code(), api::ErrorCode::kUnavailable) << "the subnet is full";
  ASSERT_TRUE(b->stop("c", std::chrono::milliseconds(0)).is_ok());
  ASSERT_TRUE(b->launch({spec("f")}).is_ok());
  EXPECT_EQ(b->address_of("f"), "10.213.0.4") << "the only free address, found by wrapping round";
}

TEST_F(ContainerBackendTest, StopRemovesNamespaceLinkAndSshd) {
  auto b = make();
  ASSERT_TRUE(b);
  ASSERT_TRUE(b->launch({spec("w1")}).is_ok());
  EXPECT_EQ(b->poll("w1").state, ProcessState::kRunning);
  ASSERT_TRUE(b->stop("w1", std::chrono::milliseconds(100)).is_ok());
  EXPECT_TRUE(issued("/usr/sbin/ip netns pids mstab12-2"));
  EXPECT_TRUE(issued("/usr/sbin/ip link delete mstab12v2"));
  EXPECT_TRUE(issued("/usr/sbin/ip netns delete mstab12-2"));
  EXPECT_NE(std::find(shared_->signals.begin(), shared_->signals.end(), std::make_pair(pid_t(1000), SIGTERM)),
            shared_->signals.end())
      << "sshd is stopped";
  EXPECT_EQ(b->poll("w1").state, ProcessState::kExited);
  EXPECT_TRUE(b->stop("w1", std::chrono::milliseconds(0)).is_ok()) << "stop is idempotent";
  EXPECT_EQ(b->poll("nope").state, ProcessState::kUnknown);
}

TEST_F(ContainerBackendTest, AgentExitTearsDownAndReportsCode) {
  auto b = make();
  ASSERT_TRUE(b);
  ASSERT_TRUE(b->launch({spec("w1")}).is_ok());
  shared_->exited.insert(1001);
  ProcessStatus st = b->poll("w1");
  EXPECT_EQ(st.state, ProcessState::kExited);
  EXPECT_EQ(st.exit_code, 0);
  EXPECT_TRUE(issued("/usr/sbin/ip netns delete mstab12-2"));
}

TEST_F(ContainerBackendTest, LinkWithoutCarrierIsLost) {
  auto b = make();
  ASSERT_TRUE(b);
  ASSERT_TRUE(b->launch({spec("w1")}).is_ok());
  shared_->files["/sys/class/net/mstab12v2/carrier"] = "1\n";
  EXPECT_EQ(b->poll("w1").state, ProcessState::kRunning);
  shared_->files["/sys/class/net/mstab12v2/carrier"] = "0\n";
  EXPECT_EQ(b->poll("w1").state, ProcessState::kLost);
}

TEST_F(ContainerBackendTest, ShutdownRemovesEverythingAndTheLedgerIsEmpty) {
  auto b = make();
  ASSERT_TRUE(b);
  ASSERT_TRUE(b->launch({spec("w1"), spec("w2")}).is_ok());
  b->shutdown();
  EXPECT_TRUE(issued("/usr/sbin/ip netns delete mstab12-2"));
  EXPECT_TRUE(issued("/usr/sbin/ip netns delete mstab12-3"));
  EXPECT_TRUE(issued("/usr/sbin/ip link delete mtest0"));
  Ledger ledger(state_ / "container" / "ledger");
  EXPECT_TRUE(ledger.entries().empty()) << Ledger::format(ledger.entries());
}

TEST_F(ContainerBackendTest, NewDaemonRemovesLeftoversOfACrashedOne) {
  fs::create_directories(state_ / "container");
  std::ofstream(state_ / "container" / "ledger") << "bridge oldbr\nnetns mstdead-2\nlink mstdeadv2\n";
  shared_->files.clear();
  auto b = make();
  ASSERT_TRUE(b);
  auto& c = shared_->commands;
  auto pos = [&](const std::string& cmd) { return std::find(c.begin(), c.end(), cmd) - c.begin(); };
  EXPECT_LT(pos("/usr/sbin/ip netns pids mstdead-2"), pos("/usr/sbin/ip netns delete mstdead-2"));
  EXPECT_LT(pos("/usr/sbin/ip netns delete mstdead-2"), pos("/usr/sbin/ip link delete mstdeadv2"));
  EXPECT_LT(pos("/usr/sbin/ip link delete mstdeadv2"), pos("/usr/sbin/ip link delete oldbr"));
  EXPECT_LT(pos("/usr/sbin/ip link delete oldbr"), pos("/usr/sbin/ip link add mtest0 type bridge"));
}

TEST_F(ContainerBackendTest, ExistingForeignBridgeIsRefused) {
  shared_->files["/sys/class/net/mtest0/ifindex"] = "7\n";
  auto b = ContainerBackend::create(options_, std::make_unique<FakeExecutor>(shared_));
  ASSERT_FALSE(b.is_ok());
  EXPECT_EQ(b.status().code(), api::ErrorCode::kUnavailable);
  EXPECT_NE(b.status().message().find("mtest0"), std::string::npos);
  EXPECT_FALSE(issued("/usr/sbin/ip link delete mtest0")) << "never delete a bridge we did not create";
}

TEST(ContainerOptionsTest, ParsesAndRejectsBackendOpts) {
  auto ok = ContainerOptions::from_map("/s", {{"bridge", "br7"}, {"subnet", "10.9.0.0/16"}, {"ssh_port", "2200"}});
  ASSERT_TRUE(ok.is_ok()) << ok.status().message();
  EXPECT_EQ(ok->bridge, "br7");
  EXPECT_EQ(ok->ssh_port, 2200);
  auto bad_key = ContainerOptions::from_map("/s", {{"brdge", "x"}});
  ASSERT_FALSE(bad_key.is_ok());
  EXPECT_EQ(bad_key.status().field(), "brdge");
  EXPECT_FALSE(ContainerOptions::from_map("/s", {{"bridge", "this-name-is-too-long"}}).is_ok());
  EXPECT_FALSE(ContainerOptions::from_map("/s", {{"ssh_port", "70000"}}).is_ok());
  // The one integer dialect: "22x" is not port 22, nor " 22" nor "+22".
  for (const char* bad : {"22x", " 22", "+22", "0x16"}) {
    EXPECT_FALSE(ContainerOptions::from_map("/s", {{"ssh_port", bad}}).is_ok()) << bad;
  }
  EXPECT_FALSE(ContainerOptions::from_map("/s", {{"subnet", "10.9.0.0/16x"}}).is_ok());
  EXPECT_FALSE(ContainerOptions::from_map("/s", {{"subnet", "10.0.0.1/24"}}).is_ok());
}

TEST(SubnetTest, HandsOutBridgeThenContainers) {
  auto s = Subnet::parse("10.213.0.0/24");
  ASSERT_TRUE(s.is_ok());
  EXPECT_EQ(s->bridge_address(), "10.213.0.1");
  EXPECT_EQ(s->host(2), "10.213.0.2");
  EXPECT_EQ(s->container_capacity(), 253u);
  EXPECT_FALSE(Subnet::parse("10.213.0.0").is_ok());
  EXPECT_FALSE(Subnet::parse("10.213.0.0/31").is_ok());
  EXPECT_FALSE(Subnet::parse("nope/24").is_ok());
  auto host_bits = Subnet::parse("10.213.0.5/24");
  ASSERT_FALSE(host_bits.is_ok());
  EXPECT_NE(host_bits.status().message().find("10.213.0.0/24"), std::string::npos);
}

TEST(ContainerHelpersTest, TcpListeningAndUrlHost) {
  std::string tcp =
      "  sl  local_address rem_address   st\n"
      "   0: 0202D50A:08AE 00000000:0000 0A 0\n"
      "   1: 0202D50A:1F90 0302D50A:9C40 01 0\n";
  EXPECT_TRUE(tcp_listening(tcp, 2222));
  EXPECT_FALSE(tcp_listening(tcp, 8080)) << "established, not listening";
  EXPECT_FALSE(tcp_listening("", 2222));
}

TEST(LedgerTest, RoundTripsAndSkipsJunk) {
  auto e = Ledger::parse("netns a\nlink b\n\ngarbage\nbridge c\nwhat d\n");
  ASSERT_EQ(e.size(), 3u);
  EXPECT_EQ(Ledger::format(e), "netns a\nlink b\nbridge c\n");
}

}  // namespace
}  // namespace muster::workers::container
