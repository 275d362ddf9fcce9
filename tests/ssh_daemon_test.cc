// musterd with the SSH backend (root only): three containers of the container
// backend stand in for remote hosts listed in an inventory file. Workers are
// started over SSH, register the hosts' own IPs, their logs stream back, stop
// ends them; an mpi cluster runs its allreduce across the hosts with the
// inventory's key.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <regex>
#include <set>
#include <thread>

#include "container_test_env.h"
#include "daemon_process.h"
#include "workers/container/container_backend.h"

namespace muster::workers::ssh {
namespace {
namespace fs = std::filesystem;
using namespace std::chrono_literals;
using nlohmann::json;
using container::ContainerBackend;

class SshDaemonTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "needs root: the remote hosts are network-namespace containers";
    env_ = std::make_unique<container::test_env::TestContainers>("sdt", 221);
    state_ = env_->state;
    container::ContainerOptions o = env_->options;
    auto c = ContainerBackend::create(o, container::make_system_executor());
    ASSERT_TRUE(c.is_ok()) << c.status().message();
    containers_ = std::move(c.value());
    std::vector<LaunchSpec> hosts;
    for (const char* id : {"host1", "host2", "host3"}) {
      LaunchSpec s;
      s.worker_id = id;
      s.agent_argv = {"/bin/sleep", "600"};
      hosts.push_back(s);
    }
    ASSERT_TRUE(containers_->launch(hosts).is_ok());
    std::ofstream inv(state_ / "inventory");
    inv << "# the containers, as if they were remote hosts\n";
    for (const char* id : {"host1", "host2", "host3"})
      inv << containers_->address_of(id) << " port=2222 user=root identity="
          << containers_->ssh_keys().client_key.string() << " slots=1\n";
    inv.close();
    // musterd as a plain shell starts it: the workers must get muster from it.
    ::unsetenv("PYTHONPATH");
    ::unsetenv("MUSTER_RUNTIME_PATH");
    daemon_ = std::make_unique<testing::DaemonProcess>();
    fs::copy_file(fs::path(std::getenv("MUSTER_BINARY_DIR")) / "bin" / "muster-mpi-hello",
                  daemon_->project() / "muster-mpi-hello");
    ASSERT_TRUE(daemon_->start({"--backend", "ssh", "--backend-opt", "inventory=" + (state_ / "inventory").string(),
                                "--backend-opt", "known_hosts=" + containers_->ssh_keys().known_hosts.string(),
                                "--stop-grace", "1"},
                               "0.0.0.0:0"))
        << daemon_->stderr_text();
  }

  void TearDown() override {
    if (geteuid() != 0) return;
    if (daemon_) daemon_->kill(SIGTERM);
    daemon_.reset();
    if (containers_) containers_->shutdown();
    containers_.reset();
    env_->remove_leftovers();
  }

  std::unique_ptr<ContainerBackend> containers_;
  std::unique_ptr<testing::DaemonProcess> daemon_;
  std::unique_ptr<container::test_env::TestContainers> env_;
  fs::path state_;
};

// What a worker's script and an MPI rank on a host run first: muster, its
// torch API and the runtime extension, from what musterd handed them.
const char* const kImports =
    "/usr/bin/python3 -c 'import muster.torch, muster.runtime; muster.runtime.extension(); print(\"imports ok\")'\n";

TEST_F(SshDaemonTest, WorkersOnHostsLogsStopAndAnMpiJob) {
  // Beyond loopback musterd speaks only TLS: the agents on the hosts register over https, pinning it.
  ASSERT_EQ(daemon_->url().rfind("https://", 0), 0u) << daemon_->url();
  daemon_->write_script("w.sh", std::string(kImports) + "echo \"on $(hostname) pid $$\"\nexec sleep 300\n");
  auto r = daemon_->post("/api/v1/workers", {{"n", 2}, {"cpu", 0.25}, {"memory", 0.25}, {"script", "w.sh"}});
  ASSERT_EQ(r.status, 201) << r.body << daemon_->stderr_text();
  const json launched = r.json();
  json ids = json::array();
  for (const auto& w : launched["workers"]) ids.push_back(w["id"]);
  auto a = daemon_->post("/api/v1/workers/await", {{"ids", ids}, {"wait_for_completion", false}, {"timeout_seconds", 60}});
  const json awaited = a.json();
  ASSERT_EQ(awaited["workers"].size(), 2u) << a.body << daemon_->stderr_text();
  std::set<std::string> hosts{containers_->address_of("host1"), containers_->address_of("host2"),
                              containers_->address_of("host3")};
  std::vector<long> pids;
  for (const auto& w : awaited["workers"]) {
    EXPECT_TRUE(hosts.count(w["ip_address"].get<std::string>())) << w.dump();
    // The agent on the host says how it enforces the limits (no launch warning can know there).
    for (const char* resource : {"cpu", "memory"}) {
      const std::string how = w["limits"].value(resource, "");
      EXPECT_TRUE(how.rfind("enforced by ", 0) == 0 || how.rfind("not enforced: ", 0) == 0) << w.dump();
      std::printf("ssh worker %s: %s %s\n", w["id"].get<std::string>().c_str(), resource, how.c_str());
    }
    std::string log;
    for (int i = 0; i < 100 && log.find("pid ") == std::string::npos; ++i) {
      log = daemon_->get("/api/v1/workers/" + w["id"].get<std::string>() + "/logs").body;
      if (log.find("pid ") == std::string::npos) std::this_thread::sleep_for(100ms);
    }
    EXPECT_NE(log.find("on host"), std::string::npos) << "streamed back from the host: " << log;
    EXPECT_NE(log.find("imports ok"), std::string::npos) << log;
    auto at = log.find("pid ");
    ASSERT_NE(at, std::string::npos) << log;
    pids.push_back(std::stol(log.substr(at + 4)));
  }
  EXPECT_NE(awaited["workers"][0]["ip_address"], awaited["workers"][1]["ip_address"]);
  auto stop = daemon_->post("/api/v1/workers/stop", {{"ids", ids}});
  EXPECT_EQ(stop.status, 200) << stop.body;
  for (long pid : pids) {
    for (int i = 0; i < 100 && fs::exists("/proc/" + std::to_string(pid)); ++i) std::this_thread::sleep_for(50ms);
    EXPECT_FALSE(fs::exists("/proc/" + std::to_string(pid))) << "worker process " << pid << " still runs";
  }

  daemon_->write_script("ranks.sh", std::string(kImports) +
                                        "echo \"rank host $(hostname)\"\nexec \"$(dirname \"$0\")/muster-mpi-hello\"\n");
  auto cr = daemon_->post("/api/v1/clusters", {{"mode", "mpi"}, {"n_workers", 3}, {"cpu", 0.25}, {"memory", 0.25},
                                               {"worker_script", "ranks.sh"}, {"launch", true},
                                               {"timeout_seconds", 60}});
  ASSERT_EQ(cr.status, 201) << cr.body;
  const std::string id = cr.json()["id"];
  json c;
  for (int i = 0; i < 450; ++i) {
    c = daemon_->get("/api/v1/clusters/" + id).json();
    std::string s = c.value("status", "");
    if (s == "succeeded" || s == "failed" || s == "stopped") break;
    std::this_thread::sleep_for(200ms);
  }
  std::ifstream in(daemon_->state() / "clusters" / id / "launcher.log");
  std::string log((std::istreambuf_iterator<char>(in)), {});
  ASSERT_EQ(c.value("status", ""), "succeeded") << c.dump() << "\n" << log;
  size_t sums = 0;
  for (size_t at = log.find("allreduce sum 6 expected 6"); at != std::string::npos;
       at = log.find("allreduce sum 6 expected 6", at + 1))
    ++sums;
  EXPECT_EQ(sums, 3u) << log;
  size_t imports = 0;
  for (size_t at = log.find("<stdout>:imports ok"); at != std::string::npos; at = log.find("<stdout>:imports ok", at + 1))
    ++imports;
  EXPECT_EQ(imports, 3u) << log;
  for (const char* h : {"host1", "host2", "host3"})
    EXPECT_NE(log.find(std::string("rank host ") + h), std::string::npos) << log;
}

}  // namespace
}  // namespace muster::workers::ssh
