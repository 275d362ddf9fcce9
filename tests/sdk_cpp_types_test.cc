// C++ SDK without a daemon: JSON <-> typed objects, request bodies, config
// discovery from the environment and the state dir.
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "sdk/cpp/config.h"
#include "sdk/cpp/error.h"
#include "sdk/cpp/types.h"

namespace muster::sdk {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

TEST(SdkCppTypes, WorkerFromJsonKeepsEveryField) {
  json j = {{"id", "w1"}, {"status", "failed"}, {"ip_address", "10.0.0.5"}, {"cpu", 0.5}, {"memory", 2},
            {"nvidia_gpu", 1}, {"kernel", "python3"}, {"script", "t.py"}, {"cluster_id", nullptr},
            {"created_at", "2026-01-01T00:00:00Z"}, {"started_at", nullptr}, {"finished_at", 1700000000},
            {"exit_code", 3}, {"reason", "the script exited with code 3"}, {"new_field", true}};
  Worker w = Worker::from_json(j);
  EXPECT_EQ(w.id, "w1");
  EXPECT_EQ(w.status, "failed");
  EXPECT_EQ(w.ip_address, "10.0.0.5");
  EXPECT_DOUBLE_EQ(w.cpu, 0.5);
  EXPECT_DOUBLE_EQ(w.memory, 2);
  EXPECT_EQ(w.nvidia_gpu, 1);
  EXPECT_EQ(w.cluster_id, "");
  EXPECT_EQ(w.created_at, "2026-01-01T00:00:00Z");
  EXPECT_EQ(w.finished_at, "1700000000");
  ASSERT_TRUE(w.exit_code.has_value());
  EXPECT_EQ(*w.exit_code, 3);
  EXPECT_TRUE(w.raw["new_field"].get<bool>());
  Worker pending = Worker::from_json({{"id", "w2"}, {"exit_code", nullptr}});
  EXPECT_FALSE(pending.exit_code.has_value());
  EXPECT_EQ(pending.ip_address, "unknown");
}

TEST(SdkCppTypes, ClusterFromJsonGroupsTasksAndAcceptsBothSpecShapes) {
  json spec = {{"ps", {"h:1"}}, {"worker", {"h:2", "h:3"}}};
  Cluster c = Cluster::from_json({{"id", "c1"}, {"mode", "ps"}, {"status", "running"},
                                  {"workers", {{"ps", {"p0"}}, {"worker", {"w0", "w1"}}}},
                                  {"cluster_spec", {{"cluster", spec}, {"task", {{"type", "worker"}}}}},
                                  {"horovodrun_command", ""}, {"reason", ""}});
  EXPECT_EQ(c.workers["worker"], (std::vector<std::string>{"w0", "w1"}));
  EXPECT_EQ(c.workers["ps"], (std::vector<std::string>{"p0"}));
  EXPECT_EQ(c.cluster_spec, spec);
  EXPECT_FALSE(c.ended());
  Cluster m = Cluster::from_json({{"id", "c2"}, {"status", "succeeded"}, {"workers", {"a", "b"}},
                                  {"cluster_spec", nullptr},
                                  {"mpirun_command", {"mpirun", "-np", "2", "python3", "t.py"}}});
  EXPECT_EQ(m.workers["worker"].size(), 2u);
  EXPECT_EQ(m.mpirun_command, "mpirun -np 2 python3 t.py");
  EXPECT_TRUE(m.ended());
}

TEST(SdkCppTypes, RequestBodiesMatchTheApi) {
  LaunchOptions l;
  l.n = 2;
  l.script = "t.py";
  l.env = {{"A", "1"}};
  l.args = {"--lr", "0.1"};
  EXPECT_EQ(l.to_json(), json({{"n", 2}, {"cpu", 1.0}, {"memory", 1.0}, {"nvidia_gpu", 0}, {"kernel", "python3"},
                               {"script", "t.py"}, {"code", ""}, {"env", {{"A", "1"}}}, {"args", {"--lr", "0.1"}}}));
  ClusterOptions ps;
  ps.n_workers = 2;
  ps.n_ps = 1;
  json pj = ps.to_json();
  EXPECT_EQ(pj["mode"], "ps");
  EXPECT_EQ(pj["n_ps"], 1);
  EXPECT_FALSE(pj.contains("slots"));
  EXPECT_FALSE(pj.contains("launch"));
  EXPECT_FALSE(pj.contains("worker_script"));
  ClusterOptions mpi;
  mpi.mode = "mpi";
  mpi.launch = false;
  mpi.ssh_port = 2200;
  json mj = mpi.to_json();
  EXPECT_FALSE(mj.contains("n_ps"));
  EXPECT_EQ(mj["slots"], 1);
  EXPECT_EQ(mj["launch"], false);
  EXPECT_EQ(mj["ssh_port"], 2200);
}

TEST(SdkCppTypes, CdswTimesWarningsAndTheNewClusterFields) {
  Worker w = Worker::from_json(json{{"id", "a"}, {"running_at", "2026-01-01T00:00:00Z"}, {"duration", 1.5}});
  EXPECT_EQ(w.running_at, "2026-01-01T00:00:00Z");
  ASSERT_TRUE(w.duration.has_value());
  EXPECT_DOUBLE_EQ(*w.duration, 1.5);
  Worker pending = Worker::from_json(json{{"id", "b"}, {"running_at", nullptr}, {"duration", nullptr}});
  EXPECT_EQ(pending.running_at, "");
  EXPECT_FALSE(pending.duration.has_value());
  EXPECT_EQ(strings(json{{"warnings", {"script wins", "x"}}}, "warnings"), (std::vector<std::string>{"script wins", "x"}));
  EXPECT_TRUE(strings(json::object(), "warnings").empty());

  ClusterOptions ps;
  ps.n_chief = 1;
  ps.n_evaluator = 1;
  json body = ps.to_json();
  EXPECT_EQ(body["n_chief"], 1);
  EXPECT_EQ(body["n_evaluator"], 1);
  EXPECT_FALSE(ClusterOptions{}.to_json().contains("n_chief"));  // an older daemon rejects unknown fields

  ClusterOptions mpi;
  mpi.mode = "mpi";
  mpi.fusion_threshold_mb = 32;
  mpi.cycle_time_ms = 5;
  mpi.timeline_filename = "tl.json";
  mpi.start_timeout = 60;
  mpi.verbose = true;
  mpi.network_interfaces = {"eth0", "eth1"};
  body = mpi.to_json();
  EXPECT_EQ(body["fusion_threshold_mb"], 32);
  EXPECT_EQ(body["cycle_time_ms"], 5.0);
  EXPECT_EQ(body["timeline_filename"], "tl.json");
  EXPECT_EQ(body["start_timeout"], 60);
  EXPECT_EQ(body["verbose"], true);
  EXPECT_EQ(body["network_interfaces"], json({"eth0", "eth1"}));
}

TEST(SdkCppTypes, SessionAddressIsChiefElseWorkerZero) {
  EXPECT_EQ(session_address({{"worker", {"a:1", "b:2"}}, {"ps", {"p:3"}}}), "grpc://a:1");
  EXPECT_EQ(session_address({{"chief", {"c:9"}}, {"worker", {"a:1"}}}), "grpc://c:9");
  EXPECT_EQ(session_address({{"worker", {{"0", "z:1"}}}}), "grpc://z:1");
  EXPECT_EQ(session_address({{"ps", {"p:1"}}}), "");
  EXPECT_EQ(ids_of({Worker::from_json({{"id", "x"}}), Worker::from_json({{"id", "y"}})}),
            (std::vector<std::string>{"x", "y"}));
}

class SdkCppConfig : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/muster-sdk-config-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    unsetenv("MUSTER_URL");
    unsetenv("MUSTER_TOKEN");
    setenv("MUSTER_STATE_DIR", dir_.c_str(), 1);
  }
  void TearDown() override {
    unsetenv("MUSTER_STATE_DIR");
    unsetenv("MUSTER_URL");
    unsetenv("MUSTER_TOKEN");
    fs::remove_all(dir_);
  }
  void write(const std::string& name, const std::string& text) { std::ofstream(dir_ / name) << text; }
  fs::path dir_;
};

TEST_F(SdkCppConfig, ReadsTheStateDir) {
  write("musterd.json", R"({"url": "http://127.0.0.1:7878/", "pid": 4})");
  write("token", "abc\n");
  Endpoint e = discover();
  EXPECT_EQ(e.url, "http://127.0.0.1:7878");
  EXPECT_EQ(e.token, "abc");
  EXPECT_EQ(state_dir(), dir_.string());
}

TEST_F(SdkCppConfig, EnvironmentAndExplicitValuesWinEachSeparately) {
  write("musterd.json", R"({"url": "http://127.0.0.1:7878"})");
  write("token", "filetoken");
  setenv("MUSTER_URL", "http://10.0.0.1:1", 1);
  EXPECT_EQ(discover().url, "http://10.0.0.1:1");
  EXPECT_EQ(discover().token, "filetoken");
  setenv("MUSTER_TOKEN", "envtoken", 1);
  EXPECT_EQ(discover().token, "envtoken");
  Endpoint e = discover(Endpoint{"http://explicit:2", "t"});
  EXPECT_EQ(e.url, "http://explicit:2");
  EXPECT_EQ(e.token, "t");
}

TEST_F(SdkCppConfig, MissingOrBrokenConfigIsUnconfigured) {
  try {
    discover();
    FAIL();
  } catch (const MusterError& e) {
    EXPECT_EQ(e.code(), "unconfigured");
    EXPECT_NE(e.message().find("MUSTER_URL"), std::string::npos);
  }
  write("musterd.json", "{broken");
  try {
    discover();
    FAIL();
  } catch (const MusterError& e) {
    EXPECT_EQ(e.code(), "unconfigured");
    EXPECT_NE(e.message().find("musterd.json"), std::string::npos);
  }
  write("musterd.json", R"({"url": "http://127.0.0.1:1"})");
  try {
    discover();
    FAIL();
  } catch (const MusterError& e) {
    EXPECT_EQ(e.code(), "unconfigured");
    EXPECT_NE(e.message().find("token"), std::string::npos);
  }
}

}  // namespace
}  // namespace muster::sdk
