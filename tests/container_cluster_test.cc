// Clusters across containers through a real musterd (root only):
// - mode=mpi, launch=true, 4 containers: the daemon's mpirun reaches each
//   container's sshd on 2222 with the generated key (strict known_hosts) and
//   runs an allreduce correctness program, one rank per container;
// - killing one container mid-run fails the cluster, naming that worker, and
//   leaves no rank, namespace or launcher behind;
// - mode=ps, 1 PS + 2 workers: the ClusterSpec/TF_CONFIG addresses are the
//   containers' own.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <regex>
#include <set>
#include <thread>

#include "container_test_env.h"
#include "daemon_process.h"
#include "workers/container/container_backend.h"

namespace muster::workers::container {
namespace {
namespace fs = std::filesystem;
using namespace std::chrono_literals;
using nlohmann::json;

class ContainerClusterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "needs root: the container backend creates network namespaces and a bridge";
    daemon_ = std::make_unique<testing::DaemonProcess>();
    exec_ = make_system_executor();
    fs::copy_file(fs::path(std::getenv("MUSTER_BINARY_DIR")) / "bin" / "muster-mpi-hello",
                  daemon_->project() / "muster-mpi-hello");
    std::vector<std::string> args = names_.daemon_args();
    args.insert(args.end(), {"--stop-grace", "1"});
    ASSERT_TRUE(daemon_->start(args, "0.0.0.0:0"))
        << daemon_->stderr_text();
  }

  void TearDown() override {
    if (!daemon_) return;
    daemon_->kill(SIGTERM);
    test_env::clean_leftovers_in(daemon_->state());
    daemon_.reset();
  }

  std::vector<std::string> namespaces() {
    std::vector<std::string> out;
    for (const auto& e : Ledger(daemon_->state() / "container" / "ledger").entries())
      if (e.kind == ResourceKind::kNetns) out.push_back(e.name);
    return out;
  }

  json wait_cluster(const std::string& id, std::chrono::seconds limit, bool until_running = false) {
    auto deadline = std::chrono::steady_clock::now() + limit;
    json c;
    while (std::chrono::steady_clock::now() < deadline) {
      c = daemon_->get("/api/v1/clusters/" + id).json();
      std::string s = c.value("status", "");
      if (s == "succeeded" || s == "failed" || s == "stopped") break;
      if (until_running && s == "running") break;
      std::this_thread::sleep_for(200ms);
    }
    return c;
  }

  std::string launcher_log(const std::string& id) {
    std::ifstream in(daemon_->state() / "clusters" / id / "launcher.log");
    return std::string(std::istreambuf_iterator<char>(in), {});
  }

  std::string ip_of(const std::string& worker_id) {
    return daemon_->get("/api/v1/workers/" + worker_id).json().value("ip_address", "");
  }

  std::unique_ptr<testing::DaemonProcess> daemon_;
  std::unique_ptr<Executor> exec_;
  const test_env::ContainerNames names_{"cct", 220};
};

TEST_F(ContainerClusterTest, MpiAllreduceAcrossFourContainers) {
  daemon_->write_script("ranks.sh", "echo \"rank host $(hostname)\"\nexec \"$(dirname \"$0\")/muster-mpi-hello\"\n");
  auto r = daemon_->post("/api/v1/clusters", {{"mode", "mpi"}, {"n_workers", 4}, {"cpu", 0.25}, {"memory", 0.25},
                                              {"worker_script", "ranks.sh"}, {"launch", true},
                                              {"timeout_seconds", 60}});
  ASSERT_EQ(r.status, 201) << r.body;
  const json created = r.json();
  const std::string id = created["id"];
  json c = wait_cluster(id, 90s);
  std::string log = launcher_log(id);
  ASSERT_EQ(c.value("status", ""), "succeeded") << c.dump() << "\n" << log;
  // -H lists the four containers' own addresses.
  std::set<std::string> hosts;
  for (const auto& wid : created["workers"]["worker"]) {
    std::string ip = ip_of(wid);
    EXPECT_EQ(ip.rfind(names_.subnet_prefix, 0), 0u) << ip;
    hosts.insert(ip);
    // Each rank ran inside its container: the container's hostname is the worker id.
    EXPECT_NE(log.find("rank host " + wid.get<std::string>()), std::string::npos) << log;
  }
  EXPECT_EQ(hosts.size(), 4u);
  size_t sums = 0;
  for (size_t at = log.find("allreduce sum 10 expected 10"); at != std::string::npos;
       at = log.find("allreduce sum 10 expected 10", at + 1))
    ++sums;
  EXPECT_EQ(sums, 4u) << log;
  EXPECT_EQ(c["launcher_exit_code"], 0);
  // The preflight's findings are on the line: Debian's Open MPI prefix and the containers' interface.
  std::string line = c.value("mpirun_command", "");
  EXPECT_NE(line.find("--prefix /usr"), std::string::npos) << line;
  EXPECT_NE(line.find("btl_tcp_if_include eth0"), std::string::npos) << line;
  EXPECT_NE(line.find("NCCL_SOCKET_IFNAME=eth0"), std::string::npos) << line;
}

TEST_F(ContainerClusterTest, KillingOneContainerFailsTheClusterNamingIt) {
  daemon_->write_script("hold.sh", "echo \"rank host $(hostname) pid $$\"\nexec sleep 300\n");
  auto r = daemon_->post("/api/v1/clusters", {{"mode", "mpi"}, {"n_workers", 3}, {"cpu", 0.25}, {"memory", 0.25},
                                              {"worker_script", "hold.sh"}, {"launch", true},
                                              {"timeout_seconds", 60}});
  ASSERT_EQ(r.status, 201) << r.body;
  const json created = r.json();
  const std::string id = created["id"];
  const std::string victim = created["workers"]["worker"][1];
  // Wait until every rank runs.
  auto deadline = std::chrono::steady_clock::now() + 60s;
  while (std::chrono::steady_clock::now() < deadline) {
    std::string log = launcher_log(id);
    if (std::count(log.begin(), log.end(), '\n') >= 3) break;
    std::this_thread::sleep_for(200ms);
  }
  std::string log = launcher_log(id);
  ASSERT_NE(log.find("rank host " + victim), std::string::npos) << log;
  std::vector<long> rank_pids;
  std::regex pid_re("pid ([0-9]+)");
  for (std::sregex_iterator it(log.begin(), log.end(), pid_re), end; it != end; ++it)
    rank_pids.push_back(std::stol((*it)[1]));
  ASSERT_EQ(rank_pids.size(), 3u) << log;

  // "Kill the container": every process in the victim's namespace.
  std::string victim_ns;
  for (const auto& ns : namespaces()) {
    CommandResult h = exec_->run({"/usr/sbin/ip", "-n", ns, "-o", "-4", "addr", "show", "dev", "eth0"});
    if (h.output.find("inet " + ip_of(victim) + "/") != std::string::npos) victim_ns = ns;
  }
  ASSERT_FALSE(victim_ns.empty());
  CommandResult pids = exec_->run({"/usr/sbin/ip", "netns", "pids", victim_ns});
  std::istringstream in(pids.output);
  for (long pid; in >> pid;) ::kill(static_cast<pid_t>(pid), SIGKILL);

  json c = wait_cluster(id, 60s);
  EXPECT_EQ(c.value("status", ""), "failed") << c.dump();
  EXPECT_NE(c.value("reason", "").find(victim), std::string::npos) << c.dump();
  // Nothing is left: the other ranks, the containers, mpirun.
  for (int i = 0; i < 100; ++i) {
    bool any = false;
    for (long pid : rank_pids) any = any || fs::exists("/proc/" + std::to_string(pid));
    if (!any && namespaces().empty()) break;
    std::this_thread::sleep_for(100ms);
  }
  for (long pid : rank_pids) EXPECT_FALSE(fs::exists("/proc/" + std::to_string(pid))) << "rank " << pid;
  EXPECT_TRUE(namespaces().empty()) << "the cluster's containers are removed";
}

TEST_F(ContainerClusterTest, PsModeTfConfigUsesTheContainersAddresses) {
  daemon_->write_script("ps.sh", "echo \"TF_CONFIG=$TF_CONFIG\"\nexec sleep 300\n");
  daemon_->write_script("w.sh", "echo \"TF_CONFIG=$TF_CONFIG\"\n");
  auto r = daemon_->post("/api/v1/clusters", {{"mode", "ps"}, {"n_ps", 1}, {"n_workers", 2}, {"cpu", 0.25},
                                              {"memory", 0.25}, {"worker_script", "w.sh"}, {"ps_script", "ps.sh"},
                                              {"timeout_seconds", 60}});
  ASSERT_EQ(r.status, 201) << r.body;
  const json created = r.json();
  json c = wait_cluster(created["id"], 90s);
  ASSERT_EQ(c.value("status", ""), "succeeded") << c.dump();
  const json& spec = c["cluster_spec"];
  std::set<std::string> spec_hosts;
  for (const char* type : {"ps", "worker"}) {
    ASSERT_TRUE(spec.contains(type)) << spec.dump();
    for (size_t i = 0; i < spec[type].size(); ++i) {
      std::string addr = spec[type][i];
      std::string host = addr.substr(0, addr.rfind(':'));
      EXPECT_EQ(host.rfind(names_.subnet_prefix, 0), 0u) << addr;
      // The task's address is its own container's.
      EXPECT_EQ(host, ip_of(created["workers"][type][i])) << addr;
      spec_hosts.insert(host);
    }
  }
  EXPECT_EQ(spec_hosts.size(), 3u) << spec.dump();
  for (const auto& wid : created["workers"]["worker"]) {
    auto logs = daemon_->get("/api/v1/workers/" + wid.get<std::string>() + "/logs");
    EXPECT_NE(logs.body.find("TF_CONFIG={"), std::string::npos) << logs.body;
    EXPECT_NE(logs.body.find(ip_of(wid)), std::string::npos) << logs.body;
  }
}

}  // namespace
}  // namespace muster::workers::container
