// musterd with the container backend (root only): workers get the containers'
// own addresses; cutting one container's link makes that worker `lost` while
// the other keeps running; stop and daemon shutdown leave no namespace,
// link or bridge; a daemon killed with SIGKILL has its leftovers removed by
// the next one started on the same state dir.
#include <gtest/gtest.h>
#include <unistd.h>

#include <thread>

#include "container_test_env.h"
#include "daemon_process.h"
#include "workers/container/container_backend.h"

namespace muster::workers::container {
namespace {
namespace fs = std::filesystem;
using namespace std::chrono_literals;
using nlohmann::json;

class ContainerDaemonTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "needs root: the container backend creates network namespaces and a bridge";
    daemon_ = std::make_unique<testing::DaemonProcess>();
    daemon_->write_script("sleep.py", "import time\nprint('up', flush=True)\ntime.sleep(120)\n");
    exec_ = make_system_executor();
  }

  void TearDown() override {
    if (!daemon_) return;
    daemon_->kill(SIGTERM);                         // a clean shutdown removes everything ...
    test_env::clean_leftovers_in(daemon_->state());  // ... and this catches what a failure left
    daemon_.reset();
  }

  bool start_daemon(std::vector<std::string> extra = {}) {
    std::vector<std::string> args = names_.daemon_args();
    args.insert(args.end(), {"--heartbeat-interval", "0.5", "--heartbeat-timeout", "4", "--stop-grace", "1"});
    args.insert(args.end(), extra.begin(), extra.end());
    return daemon_->start(args, "0.0.0.0:0");
  }

  std::vector<std::string> namespaces() {
    std::vector<std::string> out;
    for (const auto& e : Ledger(daemon_->state() / "container" / "ledger").entries())
      if (e.kind == ResourceKind::kNetns) out.push_back(e.name);
    return out;
  }

  // The namespace whose eth0 has `ip`.
  std::string namespace_with(const std::string& ip) {
    for (const auto& ns : namespaces()) {
      CommandResult r = exec_->run({"/usr/sbin/ip", "-n", ns, "-o", "-4", "addr", "show", "dev", "eth0"});
      if (r.output.find("inet " + ip + "/") != std::string::npos) return ns;
    }
    return "";
  }

  std::vector<json> launch_running(int n) {
    auto r = daemon_->post("/api/v1/workers", {{"n", n}, {"cpu", 0.5}, {"memory", 0.25}, {"script", "sleep.py"}});
    EXPECT_EQ(r.status, 201) << r.body;
    EXPECT_EQ(r.json()["workers"].size(), static_cast<size_t>(n)) << r.body;
    const json launched = r.json();
    json ids = json::array();
    for (const auto& w : launched["workers"]) ids.push_back(w["id"]);
    auto a = daemon_->post("/api/v1/workers/await",
                           {{"ids", ids}, {"wait_for_completion", false}, {"timeout_seconds", 60}});
    EXPECT_EQ(a.status, 200) << a.body;
    EXPECT_TRUE(a.json()["failures"].empty()) << a.body << "\n" << daemon_->stderr_text();
    EXPECT_EQ(a.json()["workers"].size(), static_cast<size_t>(n)) << a.body;
    return a.json()["workers"].get<std::vector<json>>();
  }

  std::string status_of(const std::string& id) {
    return daemon_->get("/api/v1/workers/" + id).json().value("status", "");
  }

  std::unique_ptr<testing::DaemonProcess> daemon_;
  std::unique_ptr<Executor> exec_;
  const test_env::ContainerNames names_{"cdt", 219};
};

TEST_F(ContainerDaemonTest, OwnAddressesLinkCutIsLostAndNothingIsLeft) {
  ASSERT_TRUE(start_daemon()) << daemon_->stderr_text();
  // Beyond loopback musterd speaks only TLS: the agents in their network
  // namespaces registered over https, pinning the daemon's certificate.
  ASSERT_EQ(daemon_->url().rfind("https://", 0), 0u) << daemon_->url();
  ASSERT_EQ(daemon_->tls_fingerprint().size(), 64u);
  auto workers = launch_running(2);
  ASSERT_EQ(workers.size(), 2u);
  std::string ip0 = workers[0]["ip_address"], ip1 = workers[1]["ip_address"];
  EXPECT_NE(ip0, ip1);
  EXPECT_EQ(ip0.rfind(names_.subnet_prefix, 0), 0u) << ip0;
  EXPECT_EQ(ip1.rfind(names_.subnet_prefix, 0), 0u) << ip1;
  EXPECT_NE(ip0, names_.subnet_prefix + "1") << "not the bridge: the agent registered from inside its container";

  std::string ns0 = namespace_with(ip0);
  ASSERT_FALSE(ns0.empty());
  ASSERT_EQ(exec_->run({"/usr/sbin/ip", "-n", ns0, "link", "set", "eth0", "down"}).exit_code, 0);
  std::string id0 = workers[0]["id"], id1 = workers[1]["id"];
  std::string s0;
  for (int i = 0; i < 200; ++i) {
    s0 = status_of(id0);
    if (s0 != "running") break;
    std::this_thread::sleep_for(100ms);
  }
  EXPECT_EQ(s0, "lost");
  EXPECT_EQ(status_of(id1), "running") << "the other container is untouched";

  auto stop = daemon_->post("/api/v1/workers/stop", {{"ids", json::array({id0, id1})}});
  EXPECT_EQ(stop.status, 200) << stop.body;
  // Stop returns once the trees are signalled; the grace and the teardown
  // follow on the backend's teardown thread.
  for (int i = 0; i < 300 && !namespaces().empty(); ++i) std::this_thread::sleep_for(100ms);
  EXPECT_TRUE(namespaces().empty()) << "stop removes the namespaces (within the grace and teardown)";
  daemon_->kill(SIGTERM);
  EXPECT_FALSE(fs::exists("/sys/class/net/" + names_.bridge)) << "shutdown removes the bridge";
  EXPECT_TRUE(Ledger(daemon_->state() / "container" / "ledger").entries().empty());
}

TEST_F(ContainerDaemonTest, NextDaemonRemovesLeftoversOfAKilledOne) {
  ASSERT_TRUE(start_daemon()) << daemon_->stderr_text();
  auto workers = launch_running(1);
  ASSERT_EQ(workers.size(), 1u);
  auto left = namespaces();
  ASSERT_EQ(left.size(), 1u);
  daemon_->kill(SIGKILL);
  ASSERT_TRUE(fs::exists("/run/netns/" + left[0])) << "a killed daemon cannot clean up";
  ASSERT_TRUE(start_daemon()) << daemon_->stderr_text();
  EXPECT_FALSE(fs::exists("/run/netns/" + left[0])) << "the new daemon removed its predecessor's container";
  EXPECT_TRUE(fs::exists("/sys/class/net/" + names_.bridge)) << "and made its own bridge";
}

TEST_F(ContainerDaemonTest, MpiPreflightFailsBeforeLaunchWhenSshdIsDown) {
  ASSERT_TRUE(start_daemon({"--backend-opt", "sshd=false"})) << daemon_->stderr_text();
  auto r = daemon_->post("/api/v1/clusters", {{"mode", "mpi"}, {"n_workers", 2}, {"cpu", 0.25}, {"memory", 0.25},
                                              {"worker_script", "sleep.py"}, {"launch", true},
                                              {"timeout_seconds", 60}});
  ASSERT_EQ(r.status, 201) << r.body;
  const json created = r.json();
  const std::string id = created["id"];
  json c;
  for (int i = 0; i < 300; ++i) {
    c = daemon_->get("/api/v1/clusters/" + id).json();
    std::string s = c.value("status", "");
    if (s == "failed" || s == "succeeded" || s == "stopped") break;
    std::this_thread::sleep_for(100ms);
  }
  EXPECT_EQ(c.value("status", ""), "failed") << c.dump();
  std::string reason = c.value("reason", "");
  EXPECT_NE(reason.find("preflight failed"), std::string::npos) << reason;
  EXPECT_NE(reason.find("unreachable over SSH"), std::string::npos) << reason;
  for (const auto& wid : created["workers"]["worker"]) {
    std::string ip = daemon_->get("/api/v1/workers/" + wid.get<std::string>()).json().value("ip_address", "");
    EXPECT_NE(reason.find("root@" + ip + ":2222"), std::string::npos) << "each host is named: " << reason;
  }
  EXPECT_FALSE(fs::exists(daemon_->state() / "clusters" / id / "launcher.log")) << "mpirun never started";
  EXPECT_TRUE(c["mpirun_argv"].empty()) << c.dump();
}

}  // namespace
}  // namespace muster::workers::container
