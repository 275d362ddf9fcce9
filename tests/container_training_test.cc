// Fashion-MNIST training across containers through musterd (root only), one
// epoch of the MLP: allreduce mode (the daemon's mpirun over 2 containers'
// sshd) and ps mode (1 PS + 2 workers, each in its own container). Both must
// reach 80% test accuracy (one epoch gives about 85%).
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <regex>
#include <thread>

#include "container_test_env.h"
#include "daemon_process.h"
#include "workers/container/container_backend.h"

namespace muster::workers::container {
namespace {
namespace fs = std::filesystem;
using namespace std::chrono_literals;
using nlohmann::json;

class ContainerTrainingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "needs root: the container backend creates network namespaces and a bridge";
    daemon_ = std::make_unique<testing::DaemonProcess>();
    fs::create_directories(daemon_->project() / "bin");
    fs::copy_file(fs::path(std::getenv("MUSTER_BINARY_DIR")) / "bin" / "fashion_mnist",
                  daemon_->project() / "bin" / "fashion_mnist");
    std::vector<std::string> args = test_env::ContainerNames("ctt", 222).daemon_args();
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

  json run_cluster(const json& body) {
    auto r = daemon_->post("/api/v1/clusters", body);
    EXPECT_EQ(r.status, 201) << r.body;
    const std::string id = r.json().value("id", "");
    json c;
    for (int i = 0; i < 900 && !id.empty(); ++i) {
      c = daemon_->get("/api/v1/clusters/" + id).json();
      std::string s = c.value("status", "");
      if (s == "succeeded" || s == "failed" || s == "stopped") break;
      std::this_thread::sleep_for(200ms);
    }
    return c;
  }

  static double accuracy(const std::string& log) {
    std::smatch m;
    if (!std::regex_search(log, m, std::regex("final test_accuracy=([0-9.]+)"))) return -1;
    return std::stod(m[1]);
  }

  const json kArgs = json::array({"--model", "mlp", "--epochs", "1", "--batch-size", "64", "--log-every", "200"});
  std::unique_ptr<testing::DaemonProcess> daemon_;
};

TEST_F(ContainerTrainingTest, AllreduceAcrossTwoContainersConverges) {
  json c = run_cluster({{"mode", "mpi"}, {"n_workers", 2}, {"cpu", 1}, {"memory", 2},
                        {"worker_script", "bin/fashion_mnist"}, {"args", kArgs}, {"launch", true},
                        {"timeout_seconds", 60}, {"env", {{"MUSTER_COMM_DEBUG", "1"}}}});
  std::ifstream in(daemon_->state() / "clusters" / c.value("id", "") / "launcher.log");
  std::string log((std::istreambuf_iterator<char>(in)), {});
  ASSERT_EQ(c.value("status", ""), "succeeded") << c.dump() << "\n" << log;
  EXPECT_NE(log.find("mode=allreduce workers=2"), std::string::npos) << log;
  // Between containers (hosts) the ring runs over muster's TCP transport.
  EXPECT_NE(log.find("rank 0 of 2, 1 on this host, ring links tcp"), std::string::npos) << log;
  EXPECT_NE(log.find("rank 1 of 2, 1 on this host, ring links tcp"), std::string::npos) << log;
  EXPECT_GE(accuracy(log), 0.80) << log;
}

TEST_F(ContainerTrainingTest, PsModeAcrossThreeContainersConverges) {
  json c = run_cluster({{"mode", "ps"}, {"n_ps", 1}, {"n_workers", 2}, {"cpu", 1}, {"memory", 2},
                        {"worker_script", "bin/fashion_mnist"}, {"args", kArgs}, {"timeout_seconds", 60}});
  ASSERT_EQ(c.value("status", ""), "succeeded") << c.dump();
  const std::string chief = c["workers"]["worker"][0];
  std::string log = daemon_->get("/api/v1/workers/" + chief + "/logs").body;
  EXPECT_GE(accuracy(log), 0.80) << log;
  const std::string ps = c["cluster_spec"]["ps"][0];
  EXPECT_EQ(ps.rfind("10.222.", 0), 0u) << "the PS is reached at its container's address: " << ps;
}

}  // namespace
}  // namespace muster::workers::container
