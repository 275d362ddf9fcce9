// C++ SDK against a real musterd (local backend), label integration.
//
// One daemon for the suite: build/bin/musterd on 127.0.0.1 with a port the OS
// picks, a temp state dir and a temp project dir holding the worker scripts.
// TearDownTestSuite stops every worker through the API, ends the daemon's
// process group, and SIGKILLs (by pid) any process left whose working
// directory is under the temp dirs, then removes them.
#include <dirent.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cctype>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <algorithm>
#include <sstream>
#include <string>
#include <mutex>
#include <thread>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "sdk/cpp/client.h"

namespace muster::sdk {
namespace {

namespace fs = std::filesystem;

void write_file(const fs::path& p, const std::string& text) {
  std::ofstream f(p);
  f << text;
}

std::string read_file(const fs::path& p) {
  std::ifstream f(p);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// Kills, by pid, processes whose cwd lies under `root` (the workers a test daemon left).
void kill_processes_under(const fs::path& root) {
  const std::string prefix = fs::weakly_canonical(root).string() + "/";
  DIR* proc = opendir("/proc");
  if (!proc) return;
  while (dirent* e = readdir(proc)) {
    char* end = nullptr;
    long pid = std::strtol(e->d_name, &end, 10);
    if (*end != '\0' || pid <= 0 || pid == getpid()) continue;
    std::error_code ec;
    fs::path cwd = fs::read_symlink(fs::path("/proc") / e->d_name / "cwd", ec);
    if (!ec && (cwd.string() + "/").rfind(prefix, 0) == 0) kill(static_cast<pid_t>(pid), SIGKILL);
  }
  closedir(proc);
}

// 1 ps task (ps.py) and 2 workers running `worker_script`, small.
ClusterOptions small_ps_cluster(const std::string& worker_script) {
  ClusterOptions opts;
  opts.n_workers = 2;
  opts.n_ps = 1;
  opts.cpu = 0.5;
  opts.memory = 1;
  opts.worker_script = worker_script;
  opts.ps_script = "ps.py";
  return opts;
}

// The TF_CONFIG a task printed as a "TF_CONFIG=<json>" line of `log`; null if none.
nlohmann::json printed_tf_config(const std::string& log) {
  const auto at = log.find("TF_CONFIG=");
  if (at == std::string::npos) return nullptr;
  return nlohmann::json::parse(log.substr(at + 10, log.find('\n', at) - at - 10), nullptr, false);
}

class SdkCppTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const char* bin = std::getenv("MUSTER_BINARY_DIR");
    ASSERT_NE(bin, nullptr) << "MUSTER_BINARY_DIR is not set (run under ctest)";
    const std::string musterd = std::string(bin) + "/bin/musterd";
    ASSERT_TRUE(fs::exists(musterd)) << musterd;
    std::error_code ignored;
    fs::remove(responses_log(), ignored);  // this run's answers only

    char tmpl[] = "/tmp/muster-sdk-cpp-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    root_ = tmpl;
    fs::create_directories(root_ / "project");
    fs::create_directories(root_ / "state");
    write_file(root_ / "project/work.py",
               "import os, time\n"
               "print('hello from', os.environ['MUSTER_WORKER_ID'], flush=True)\n"
               "time.sleep(float(os.environ.get('SLEEP', '0.5')))\n");
    write_file(root_ / "project/crash.py", "print('about to crash', flush=True)\nraise SystemExit(3)\n");
    write_file(root_ / "project/show_tf_config.py", "import os\nprint('TF_CONFIG=' + os.environ['TF_CONFIG'])\n");
    write_file(root_ / "project/ps.py", "import time\ntime.sleep(600)\n");
    write_file(root_ / "project/lines.py", "for i in range(1500):\n    print('line %d' % i)\n");
    write_file(root_ / "project/show_rank.py",
               "import os\nprint('RANK=%s WORLD_SIZE=%s' % (os.environ['RANK'], os.environ['WORLD_SIZE']), flush=True)\n");
    write_file(root_ / "project/crash_worker_1.py",
               "import json, os, sys, time\n"
               "if json.loads(os.environ['TF_CONFIG'])['task']['index'] == 1:\n"
               "    print('worker 1 gives up', flush=True)\n"
               "    sys.exit(3)\n"
               "time.sleep(600)\n");

    const std::string project = (root_ / "project").string(), state = (root_ / "state").string();
    const std::string log = (root_ / "musterd.log").string();
    pid_ = fork();
    ASSERT_GE(pid_, 0);
    if (pid_ == 0) {
      setsid();
      FILE* out = std::freopen(log.c_str(), "w", stdout);
      if (out) dup2(fileno(stdout), STDERR_FILENO);
      execl(musterd.c_str(), musterd.c_str(), "--listen", "127.0.0.1:0", "--project-dir", project.c_str(),
            "--state-dir", state.c_str(), "--backend", "local", static_cast<char*>(nullptr));
      _exit(127);
    }
    // Ready once musterd.json and the token exist and the API answers.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (std::chrono::steady_clock::now() < deadline) {
      int status = 0;
      ASSERT_EQ(waitpid(pid_, &status, WNOHANG), 0) << "musterd exited:\n" << read_file(log);
      auto info = nlohmann::json::parse(read_file(root_ / "state/musterd.json"), nullptr, false);
      std::string token = read_file(root_ / "state/token");
      while (!token.empty() && std::isspace(static_cast<unsigned char>(token.back()))) token.pop_back();
      if (info.is_object() && info.contains("url") && !token.empty()) {
        try {
          Client probe(ClientOptions{info["url"].get<std::string>(), token, 5});
          probe.list_workers();
          url_ = probe.url();
          return;
        } catch (const MusterError&) {
        }
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    FAIL() << "musterd not ready in 30 s:\n" << read_file(log);
  }

  static void TearDownTestSuite() {
    if (pid_ > 0) {
      try {
        if (!url_.empty()) client().stop_all_workers();
      } catch (const MusterError&) {
      }
      kill(-pid_, SIGTERM);
      for (int i = 0; i < 100 && waitpid(pid_, nullptr, WNOHANG) == 0; ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      kill(-pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
      pid_ = -1;
    }
    if (!root_.empty()) {
      kill_processes_under(root_);
      std::error_code ec;
      fs::remove_all(root_, ec);
    }
  }

  void SetUp() override {
    if (url_.empty()) GTEST_SKIP() << "no daemon (see suite set-up failure)";
  }

  // A client found the way a notebook finds it: through the state dir only.
  // Every answer it gets is appended to the responses log (through the
  // SDK's response observer), which ctest sdk_cpp_conformance then checks
  // against api/openapi.yaml.
  static Client client() {
    setenv("MUSTER_STATE_DIR", (root_ / "state").c_str(), 1);
    unsetenv("MUSTER_URL");
    unsetenv("MUSTER_TOKEN");
    return recorded(Client::from_environment());
  }

  static Client recorded(Client client) {
    client.set_response_observer(record_response);
    return client;
  }

  // One JSON line per answer, under $MUSTER_BINARY_DIR (see tests/sdk.cmake).
  static void record_response(const Exchange& e) {
    static std::mutex mu;
    std::lock_guard<std::mutex> lock(mu);
    std::ofstream out(responses_log(), std::ios::app);
    out << nlohmann::json{{"method", e.method}, {"url", e.path_and_query}, {"status", e.status},
                          {"content_type", e.content_type}, {"body", e.body}}
                .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)
        << "\n";
  }

  static fs::path responses_log() {
    const char* dir = std::getenv("MUSTER_BINARY_DIR");
    return fs::path(dir ? dir : ".") / "sdk_cpp_test.responses.jsonl";
  }

  static inline fs::path root_;
  static inline pid_t pid_ = -1;
  static inline std::string url_;
};

TEST_F(SdkCppTest, DiscoversTheDaemonThroughTheStateDir) {
  EXPECT_EQ(client().url(), url_);
  EXPECT_EQ(url_.rfind("http://127.0.0.1:", 0), 0u) << url_;
}

TEST_F(SdkCppTest, LaunchAwaitRunningThenCompletionThenStop) {
  Client c = client();
  LaunchOptions opts;
  opts.n = 3;
  opts.cpu = 0.5;
  opts.memory = 1;
  opts.script = "work.py";
  opts.env = {{"SLEEP", "1.5"}};
  std::vector<Worker> workers = c.launch_workers(opts);
  ASSERT_EQ(workers.size(), 3u);
  const auto ids = ids_of(workers);

  AwaitResult up = c.await_workers(ids, AwaitOptions{false, 60});
  EXPECT_TRUE(up.failures.empty()) << up.failures.front().reason;
  ASSERT_EQ(up.workers.size(), 3u);
  for (const Worker& w : up.workers) {
    EXPECT_EQ(w.status, "running");
    EXPECT_NE(w.ip_address, "unknown");
    EXPECT_FALSE(w.ip_address.empty());
  }

  AwaitResult done = c.await_workers(ids, AwaitOptions{true, 60});
  EXPECT_TRUE(done.failures.empty());
  ASSERT_EQ(done.workers.size(), 3u);
  for (const Worker& w : done.workers) {
    EXPECT_EQ(w.status, "succeeded");
    ASSERT_TRUE(w.exit_code.has_value());
    EXPECT_EQ(*w.exit_code, 0);
  }
  EXPECT_NE(c.worker_logs(ids[0]).find("hello from " + ids[0]), std::string::npos);
  EXPECT_EQ(c.get_worker(ids[2]).id, ids[2]);
  bool listed = false;
  for (const Worker& w : c.list_workers()) listed |= w.id == ids[1];
  EXPECT_TRUE(listed);

  // A worker that never ends: stop it, and it is "stopped".
  opts.n = 1;
  opts.env = {{"SLEEP", "600"}};
  std::vector<Worker> sleeper = c.launch_workers(opts);
  ASSERT_TRUE(c.await_workers(ids_of(sleeper), AwaitOptions{false, 60}).failures.empty());
  EXPECT_TRUE(c.stop_workers({}).empty());  // an empty list is not "every worker"
  EXPECT_EQ(c.get_worker(sleeper[0].id).status, "running");
  std::vector<Worker> stopped = c.stop_workers(ids_of(sleeper));
  ASSERT_EQ(stopped.size(), 1u);
  EXPECT_EQ(c.get_worker(sleeper[0].id).status, "stopped");
}

TEST_F(SdkCppTest, CrashingScriptIsAFailureWithExitCodeAndLog) {
  Client c = client();
  LaunchOptions opts;
  opts.cpu = 0.5;
  opts.memory = 1;
  opts.script = "crash.py";
  std::vector<Worker> workers = c.launch_workers(opts);
  AwaitResult res = c.await_workers(ids_of(workers), AwaitOptions{true, 60});
  EXPECT_TRUE(res.workers.empty());
  ASSERT_EQ(res.failures.size(), 1u);
  EXPECT_EQ(res.failures[0].status, "failed");
  ASSERT_TRUE(res.failures[0].exit_code.has_value());
  EXPECT_EQ(*res.failures[0].exit_code, 3);
  EXPECT_NE(c.worker_logs(workers[0].id, 1).find("about to crash"), std::string::npos);
}

TEST_F(SdkCppTest, LogsStartAtTheEndWithAMarkerAndReplayFromTheStart) {
  Client c = client();
  LaunchOptions opts;
  opts.cpu = 0.5;
  opts.memory = 0.5;
  opts.script = "lines.py";
  std::vector<Worker> workers = c.launch_workers(opts);
  AwaitResult res = c.await_workers(ids_of(workers), AwaitOptions{true, 60});
  ASSERT_EQ(res.workers.size(), 1u);
  const std::string id = workers[0].id;
  auto lines_of = [](const std::string& text) {
    std::vector<std::string> out;
    std::istringstream in(text);
    for (std::string line; std::getline(in, line);) out.push_back(line);
    return out;
  };
  // The default read: a marker line, then the last 1000 lines.
  auto tail = lines_of(c.worker_logs(id));
  ASSERT_EQ(tail.size(), 1001u);
  EXPECT_EQ(tail[0].rfind("[muster] ", 0), 0u) << tail[0];
  EXPECT_EQ(tail[1], "line 500");
  EXPECT_EQ(tail.back(), "line 1499");
  EXPECT_EQ(lines_of(c.worker_logs(id, 2)), (std::vector<std::string>{"line 1498", "line 1499"}));
  auto whole = lines_of(c.worker_logs(id, std::nullopt, true));
  EXPECT_EQ(whole.back(), "line 1499");
  EXPECT_EQ(std::count_if(whole.begin(), whole.end(), [](const std::string& l) { return l.rfind("line ", 0) == 0; }),
            1500);
  // Following does the same, and the offset it returns leaves the marker out.
  std::vector<std::string> followed;
  const std::uint64_t end = c.follow_worker_logs(id, [&](const std::string& l) {
    followed.push_back(l);
    return true;
  });
  ASSERT_EQ(followed, tail);
  EXPECT_EQ(end, fs::file_size(root_ / "state/workers" / id / "output.log"));
  FollowOptions from_start;
  from_start.from_start = true;
  followed.clear();
  c.follow_worker_logs(id, [&](const std::string& l) {
    followed.push_back(l);
    return true;
  }, from_start);
  EXPECT_EQ(followed, whole);
}

TEST_F(SdkCppTest, ErrorsCarryCodeMessageAndField) {
  Client c = client();
  LaunchOptions opts;
  opts.n = 0;
  opts.script = "work.py";
  try {
    c.launch_workers(opts);
    FAIL() << "n=0 was accepted";
  } catch (const MusterError& e) {
    EXPECT_EQ(e.code(), "invalid_argument");
    EXPECT_EQ(e.field(), "n");
    EXPECT_EQ(e.http_status(), 400);
    EXPECT_FALSE(e.message().empty());
  }
  opts.n = 1;
  opts.script = "../escape.py";
  try {
    c.launch_workers(opts);
    FAIL() << "a script outside the project was accepted";
  } catch (const MusterError& e) {
    EXPECT_EQ(e.code(), "invalid_argument");
    EXPECT_EQ(e.field(), "script");
  }
  try {
    c.get_worker("no-such-worker");
    FAIL();
  } catch (const MusterError& e) {
    EXPECT_EQ(e.code(), "not_found");
    EXPECT_EQ(e.http_status(), 404);
  }
  try {
    recorded(Client(ClientOptions{url_, "wrong-token", 10})).list_workers();
    FAIL();
  } catch (const MusterError& e) {
    EXPECT_EQ(e.code(), "unauthenticated");
    EXPECT_EQ(e.http_status(), 401);
  }
}

TEST_F(SdkCppTest, RunClusterGivesTheSpecAndSessionAddress) {
  Client c = client();
  RunClusterResult r = c.run_cluster(small_ps_cluster("show_tf_config.py"), /*completion_timeout_seconds=*/120);
  EXPECT_EQ(r.cluster.status, "succeeded");
  ASSERT_TRUE(r.cluster_spec.is_object()) << r.cluster.raw.dump();
  ASSERT_EQ(r.cluster_spec["worker"].size(), 2u);
  ASSERT_EQ(r.cluster_spec["ps"].size(), 1u);
  EXPECT_EQ(r.session_addr, "grpc://" + r.cluster_spec["worker"][0].get<std::string>());
  ASSERT_EQ(r.cluster.workers["worker"].size(), 2u);
  // Worker 1 saw its own task and the same cluster.
  const std::string log = c.worker_logs(r.cluster.workers["worker"][1]);
  const auto tf = printed_tf_config(log);
  ASSERT_TRUE(tf.is_object()) << log;
  EXPECT_EQ(tf["task"]["type"], "worker");
  EXPECT_EQ(tf["task"]["index"], 1);
  EXPECT_EQ(tf["cluster"], r.cluster_spec);
  // A ps cluster's logs are the chief's: worker 0's TF_CONFIG, not worker 1's.
  const std::string chief = c.cluster_logs(r.cluster.id);
  const auto chief_tf = printed_tf_config(chief);
  ASSERT_TRUE(chief_tf.is_object()) << chief;
  EXPECT_EQ(chief_tf["task"]["type"], "worker");
  EXPECT_EQ(chief_tf["task"]["index"], 0);
}

TEST_F(SdkCppTest, FailingTaskThrowsClusterFailedNamingIt) {
  Client c = client();
  try {
    c.run_cluster(small_ps_cluster("crash_worker_1.py"), 120);
    FAIL() << "the cluster did not fail";
  } catch (const ClusterFailed& e) {
    EXPECT_EQ(e.task(), "worker:1");
    EXPECT_EQ(e.code(), "cluster_failed");
    EXPECT_NE(e.message().find("exit code 3"), std::string::npos) << e.message();
    EXPECT_NE(e.message().find("worker 1 gives up"), std::string::npos) << e.message();
    EXPECT_EQ(c.get_cluster(e.cluster_id()).status, "failed");
  }
}

TEST_F(SdkCppTest, HorovodrunBuildsTheLinesAndStops) {
  Client c = client();
  ClusterOptions base;
  base.cpu = 0.5;
  base.memory = 1;
  base.launch = false;
  Cluster cl = c.horovodrun(2, "work.py", 1, base);
  EXPECT_EQ(cl.mode, "mpi");
  EXPECT_EQ(cl.horovodrun_command.rfind("horovodrun -np 2 -H ", 0), 0u) << cl.horovodrun_command;
  EXPECT_EQ(cl.mpirun_command.rfind("mpirun ", 0), 0u) << cl.mpirun_command;
  EXPECT_EQ(cl.workers["worker"].size(), 2u);
  EXPECT_EQ(c.cluster_logs(cl.id, 5), "");  // launch=false: mpirun never runs, so no log
  try {
    c.cluster_logs("c-no-such-cluster");
    ADD_FAILURE() << "an unknown cluster has logs";
  } catch (const MusterError& e) {
    EXPECT_EQ(e.code(), "not_found");
  }
  c.stop_cluster(cl.id);
  EXPECT_EQ(c.await_cluster(cl.id, 30).status, "stopped");
  bool listed = false;
  for (const Cluster& x : c.list_clusters()) listed |= x.id == cl.id;
  EXPECT_TRUE(listed);
}

TEST_F(SdkCppTest, TorchrunGivesEveryProcessItsRank) {
  Client c = client();
  ClusterOptions base;
  base.cpu = 0.5;
  base.memory = 0.5;
  Cluster cl = c.torchrun(2, "show_rank.py", 2, base, /*wait_for_completion=*/true);
  EXPECT_EQ(cl.mode, "torchrun");
  EXPECT_EQ(cl.status, "succeeded");
  EXPECT_EQ(cl.torchrun_command.rfind("torchrun --nnodes=2 --nproc_per_node=2 --rdzv_backend=c10d ", 0), 0u)
      << cl.torchrun_command;
  ASSERT_EQ(cl.workers["worker"].size(), 2u);
  const std::string log = c.worker_logs(cl.workers["worker"][1]);  // node 1: ranks 2 and 3
  EXPECT_NE(log.find("RANK=2 WORLD_SIZE=4"), std::string::npos) << log;
  EXPECT_NE(log.find("RANK=3 WORLD_SIZE=4"), std::string::npos) << log;
}

TEST(SdkCppUnit, ErrorFromResponseParsesTheDaemonsForm) {
  MusterError e = error_from_response(400, R"({"error":{"code":"invalid_argument","message":"bad n","field":"n"}})");
  EXPECT_EQ(e.code(), "invalid_argument");
  EXPECT_EQ(e.message(), "bad n");
  EXPECT_EQ(e.field(), "n");
  MusterError html = error_from_response(502, "<html>gateway</html>");
  EXPECT_EQ(html.code(), "unknown");
  EXPECT_EQ(html.message(), "<html>gateway</html>");
  EXPECT_EQ(error_from_response(404, "").code(), "not_found");
}

TEST(SdkCppUnit, UnreachableDaemonIsUnavailable) {
  try {
    Client(ClientOptions{"http://127.0.0.1:1", "tok", 5}).list_workers();
    FAIL();
  } catch (const MusterError& e) {
    EXPECT_EQ(e.code(), "unavailable");
  }
}

}  // namespace
}  // namespace muster::sdk
