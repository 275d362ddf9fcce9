// A real musterd with the local backend and real muster-agents running
// Python scripts: launch/await, crash reporting, startup timeout, stopping a
// process tree, and a daemon restart that keeps state and adopts a worker.
#include <gtest/gtest.h>
#include <signal.h>

#include <fstream>
#include <thread>

#include "daemon_process.h"

using muster::testing::DaemonProcess;
using nlohmann::json;
using namespace std::chrono_literals;

namespace {

json ids_of(const json& workers) {
  json ids = json::array();
  for (const auto& w : workers) ids.push_back(w["id"]);
  return ids;
}

// True once /proc/<pid> is gone or a zombie.
bool process_gone(int pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat;
  if (!std::getline(in, stat)) return true;
  const auto close = stat.rfind(')');
  return close != std::string::npos && close + 2 < stat.size() && stat[close + 2] == 'Z';
}

TEST(MusterdIntegration, EightWorkersRunThenComplete) {
  DaemonProcess d;
  d.write_script("work.py",
                 "import os, sys, time\n"
                 "print('worker', os.environ['MUSTER_WORKER_ID'], 'ip', os.environ['MUSTER_IP_ADDRESS'],\n"
                 "      'lr', os.environ['LR'], 'args', sys.argv[1:])\n"
                 "time.sleep(float(os.environ.get('SLEEP', '2')))\n");
  ASSERT_TRUE(d.start({"--heartbeat-interval", "0.5"})) << d.stderr_text();
  auto r = d.post("/api/v1/workers", {{"n", 8}, {"cpu", 0.25}, {"memory", 0.5}, {"script", "work.py"},
                                      {"env", {{"LR", "0.1"}}}, {"args", {"--epochs", "1"}}});
  ASSERT_EQ(r.status, 201) << r.body;
  const json launched = r.json();
  ASSERT_EQ(launched["workers"].size(), 8u);
  const json ids = ids_of(launched["workers"]);

  r = d.post("/api/v1/workers/await", {{"ids", ids}, {"wait_for_completion", false}, {"timeout_seconds", 60}});
  ASSERT_EQ(r.status, 200) << r.body;
  json running = r.json();
  ASSERT_EQ(running["workers"].size(), 8u) << r.body;
  EXPECT_TRUE(running["failures"].empty());
  for (size_t i = 0; i < 8; ++i) {
    EXPECT_EQ(running["workers"][i]["id"], ids[i]);
    EXPECT_EQ(running["workers"][i]["ip_address"], "127.0.0.1");
  }

  r = d.post("/api/v1/workers/await", {{"ids", ids}, {"wait_for_completion", true}, {"timeout_seconds", 90}});
  ASSERT_EQ(r.status, 200) << r.body;
  json done = r.json();
  ASSERT_EQ(done["workers"].size(), 8u) << r.body;
  for (const auto& w : done["workers"]) {
    EXPECT_EQ(w["status"], "succeeded");
    EXPECT_EQ(w["exit_code"], 0);
    EXPECT_FALSE(w["finished_at"].is_null());
  }
  const std::string id0 = ids[0];
  r = d.get("/api/v1/workers/" + id0 + "/logs?tail=1");
  ASSERT_EQ(r.status, 200);
  EXPECT_NE(r.body.find("worker " + id0 + " ip 127.0.0.1 lr 0.1 args ['--epochs', '1']"), std::string::npos)
      << r.body;
}

TEST(MusterdIntegration, CrashLandsInFailuresWithExitCodeAndLog) {
  DaemonProcess d;
  d.write_script("crash.py", "import sys\nprint('about to fail: bad hyperparameter')\nsys.exit(3)\n");
  ASSERT_TRUE(d.start()) << d.stderr_text();
  auto r = d.post("/api/v1/workers", {{"n", 1}, {"cpu", 1}, {"memory", 1}, {"script", "crash.py"}});
  ASSERT_EQ(r.status, 201) << r.body;
  r = d.post("/api/v1/workers/await", {{"ids", ids_of(r.json()["workers"])}, {"timeout_seconds", 60}});
  ASSERT_EQ(r.status, 200) << r.body;
  const json result = r.json();
  EXPECT_TRUE(result["workers"].empty());
  ASSERT_EQ(result["failures"].size(), 1u);
  const json& f = result["failures"][0];
  EXPECT_EQ(f["status"], "failed");
  EXPECT_EQ(f["exit_code"], 3);
  EXPECT_NE(f["reason"].get<std::string>().find("code 3"), std::string::npos);
  EXPECT_NE(f["log_tail"].get<std::string>().find("about to fail: bad hyperparameter"), std::string::npos) << f;

  // Bad input is rejected with the field named, and launches nothing.
  r = d.post("/api/v1/workers", {{"n", 1}, {"cpu", 1}, {"memory", 1}, {"script", "../crash.py"}});
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(r.json()["error"]["field"], "script");
  EXPECT_EQ(d.get("/api/v1/workers").json()["workers"].size(), 1u);
}

TEST(MusterdIntegration, AgentThatNeverRegistersTimesOut) {
  DaemonProcess d;
  // A stand-in agent that never calls the daemon.
  d.write_script("silent_agent.sh", "#!/bin/sh\necho \"$$\" > silent.pid\nexec sleep 120\n", true);
  ASSERT_TRUE(d.start({"--agent-path", (d.project() / "silent_agent.sh").string(), "--startup-timeout", "2",
                       "--stop-grace", "1"}))
      << d.stderr_text();
  auto r = d.post("/api/v1/workers", {{"n", 1}, {"cpu", 1}, {"memory", 1}, {"code", "print(1)"}});
  ASSERT_EQ(r.status, 201) << r.body;
  const std::string id = r.json()["workers"][0]["id"];
  r = d.post("/api/v1/workers/await", {{"ids", {id}}, {"wait_for_completion", false}, {"timeout_seconds", 60}});
  ASSERT_EQ(r.status, 200) << r.body;
  const json result = r.json();
  ASSERT_EQ(result["failures"].size(), 1u) << r.body;
  EXPECT_EQ(result["failures"][0]["status"], "timedout");
  EXPECT_NE(result["failures"][0]["reason"].get<std::string>().find("startup timeout"), std::string::npos);
  // The stand-in was stopped, too.
  std::ifstream pid_file(d.state() / "workers" / id / "silent.pid");
  int pid = 0;
  ASSERT_TRUE(pid_file >> pid);
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (!process_gone(pid) && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(50ms);
  EXPECT_TRUE(process_gone(pid));
}

TEST(MusterdIntegration, StopKillsTheProcessTree) {
  DaemonProcess d;
  d.write_script("tree.py",
                 "import os, subprocess, time\n"
                 "os.chdir(os.environ['MUSTER_WORKER_DIR'])  # the script starts in the project\n"
                 "child = subprocess.Popen(['sleep', '300'])\n"
                 "open('grandchild.pid.tmp', 'w').write(str(child.pid))\n"
                 "os.rename('grandchild.pid.tmp', 'grandchild.pid')\n"
                 "time.sleep(300)\n");
  ASSERT_TRUE(d.start({"--stop-grace", "2"})) << d.stderr_text();
  auto r = d.post("/api/v1/workers", {{"n", 1}, {"cpu", 1}, {"memory", 1}, {"script", "tree.py"}});
  ASSERT_EQ(r.status, 201) << r.body;
  const std::string id = r.json()["workers"][0]["id"];
  const auto pid_path = d.state() / "workers" / id / "grandchild.pid";
  const auto deadline = std::chrono::steady_clock::now() + 30s;
  while (!std::filesystem::exists(pid_path) && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(50ms);
  }
  std::ifstream in(pid_path);
  int grandchild = 0;
  ASSERT_TRUE(in >> grandchild) << "the script did not start its grandchild";
  ASSERT_FALSE(process_gone(grandchild));

  r = d.post("/api/v1/workers/stop", {{"ids", {id}}});
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.json()["workers"][0]["status"], "stopped");
  // stop returns once the tree is signalled; the grace and SIGKILL follow.
  const auto gone_by = std::chrono::steady_clock::now() + 15s;
  while (!process_gone(grandchild) && std::chrono::steady_clock::now() < gone_by) {
    std::this_thread::sleep_for(50ms);
  }
  EXPECT_TRUE(process_gone(grandchild));
  EXPECT_EQ(d.get("/api/v1/workers/" + id).json()["status"], "stopped");
}

TEST(MusterdIntegration, SilentAgentBecomesLost) {
  DaemonProcess d;
  d.write_script("long.py",
                 "import os, time\n"
                 "os.chdir(os.environ['MUSTER_WORKER_DIR'])  # the script starts in the project\n"
                 "open('agent.pid.tmp', 'w').write(str(os.getppid()))\n"
                 "os.rename('agent.pid.tmp', 'agent.pid')\n"
                 "time.sleep(300)\n");
  ASSERT_TRUE(d.start({"--heartbeat-interval", "0.3", "--heartbeat-timeout", "2", "--stop-grace", "1"}))
      << d.stderr_text();
  auto r = d.post("/api/v1/workers", {{"n", 1}, {"cpu", 1}, {"memory", 1}, {"script", "long.py"}});
  ASSERT_EQ(r.status, 201) << r.body;
  const std::string id = r.json()["workers"][0]["id"];
  const auto pid_path = d.state() / "workers" / id / "agent.pid";
  const auto deadline = std::chrono::steady_clock::now() + 30s;
  while (!std::filesystem::exists(pid_path) && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(50ms);
  }
  std::ifstream in(pid_path);
  int agent = 0;
  ASSERT_TRUE(in >> agent);
  ASSERT_EQ(::kill(agent, SIGSTOP), 0);  // alive, but silent
  r = d.post("/api/v1/workers/await", {{"ids", {id}}, {"timeout_seconds", 30}});
  ASSERT_EQ(r.status, 200) << r.body;
  ASSERT_EQ(r.json()["failures"].size(), 1u) << r.body;
  EXPECT_EQ(r.json()["failures"][0]["status"], "lost");
  EXPECT_NE(r.json()["failures"][0]["reason"].get<std::string>().find("heartbeat"), std::string::npos);
  // The lost worker's processes are ended, stopped agent included.
  const auto gone_by = std::chrono::steady_clock::now() + 10s;
  while (!process_gone(agent) && std::chrono::steady_clock::now() < gone_by) std::this_thread::sleep_for(50ms);
  EXPECT_TRUE(process_gone(agent));
}

// The daemon goes down by SIGTERM (clean shutdown: workers keep running for
// the next daemon) or SIGKILL (crash); either way nothing is lost.
class MusterdRestart : public ::testing::TestWithParam<int> {};

TEST_P(MusterdRestart, KeepsStateAndAdoptsRunningWorker) {
  DaemonProcess d;
  d.write_script("quick.py", "print('quick')\n");
  d.write_script("crash.py", "raise SystemExit(4)\n");
  d.write_script("slow.py", "import time\ntime.sleep(6)\nprint('slow done')\n");
  const std::vector<std::string> flags = {"--heartbeat-interval", "0.5", "--heartbeat-timeout", "5"};
  ASSERT_TRUE(d.start(flags)) << d.stderr_text();
  const std::string port = d.port();

  auto quick = d.post("/api/v1/workers", {{"n", 1}, {"cpu", 1}, {"memory", 1}, {"script", "quick.py"}});
  auto crash = d.post("/api/v1/workers", {{"n", 1}, {"cpu", 1}, {"memory", 1}, {"script", "crash.py"}});
  ASSERT_EQ(quick.status, 201);
  ASSERT_EQ(crash.status, 201);
  const json finished = {quick.json()["workers"][0]["id"], crash.json()["workers"][0]["id"]};
  auto r = d.post("/api/v1/workers/await", {{"ids", finished}, {"timeout_seconds", 60}});
  ASSERT_EQ(r.status, 200);
  ASSERT_EQ(r.json()["workers"].size(), 1u) << r.body;
  ASSERT_EQ(r.json()["failures"].size(), 1u) << r.body;

  auto slow = d.post("/api/v1/workers", {{"n", 1}, {"cpu", 1}, {"memory", 1}, {"script", "slow.py"}});
  ASSERT_EQ(slow.status, 201);
  const std::string slow_id = slow.json()["workers"][0]["id"];
  r = d.post("/api/v1/workers/await", {{"ids", {slow_id}}, {"wait_for_completion", false}, {"timeout_seconds", 60}});
  ASSERT_EQ(r.json()["workers"].size(), 1u) << r.body;
  const json before = d.get("/api/v1/workers").json()["workers"];

  d.kill(GetParam());
  EXPECT_EQ(std::filesystem::exists(d.state() / "musterd.json"), GetParam() == SIGKILL);
  ASSERT_TRUE(d.start(flags, "127.0.0.1:" + port)) << d.stderr_text();
  const json after = d.get("/api/v1/workers").json()["workers"];
  ASSERT_EQ(after.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(after[i]["id"], before[i]["id"]);
    EXPECT_EQ(after[i]["status"], before[i]["status"]);
    EXPECT_EQ(after[i]["exit_code"], before[i]["exit_code"]);
  }
  EXPECT_EQ(after[1]["status"], "failed");
  EXPECT_EQ(after[2]["status"], "running");
  // The slow worker's agent keeps heartbeating to the new daemon and reports
  // its exit there: adopted.
  r = d.post("/api/v1/workers/await", {{"ids", {slow_id}}, {"timeout_seconds", 60}});
  ASSERT_EQ(r.status, 200);
  ASSERT_EQ(r.json()["workers"].size(), 1u) << r.body;
  EXPECT_EQ(r.json()["workers"][0]["status"], "succeeded");
  r = d.get("/api/v1/workers/" + slow_id + "/logs");
  EXPECT_NE(r.body.find("slow done"), std::string::npos) << r.body;
}

INSTANTIATE_TEST_SUITE_P(Signals, MusterdRestart, ::testing::Values(SIGTERM, SIGKILL),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return info.param == SIGTERM ? std::string("Sigterm") : std::string("Sigkill");
                         });

}  // namespace
