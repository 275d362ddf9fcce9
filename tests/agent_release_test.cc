// A real muster-agent against an in-process daemon (registry + HTTP server,
// FakeBackend so the test starts the agent itself): a held worker reserves
// a port, registers, waits for release, gets its env and cluster.json, runs
// the script and reports success. Label integration (real processes).
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <fcntl.h>

#include <filesystem>
#include <fstream>
#include <thread>

#include "fake_backend.h"
#include "service/agent_routes.h"
#include "service/http_server.h"
#include "service/registry/registry.h"
#include "service/worker_routes.h"

namespace fs = std::filesystem;
using namespace muster;
using namespace std::chrono_literals;

extern char** environ;

namespace {

// Runs LaunchSpec like the local backend would, and reaps it at the end.
class AgentProcess {
 public:
  explicit AgentProcess(const workers::LaunchSpec& spec) {
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, spec.log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    posix_spawn_file_actions_adddup2(&fa, 1, 2);
    posix_spawn_file_actions_addchdir_np(&fa, spec.working_dir.c_str());
    posix_spawn_file_actions_addclosefrom_np(&fa, 3);
    std::vector<std::string> env;
    for (char** e = environ; *e; ++e) env.emplace_back(*e);
    for (const auto& [k, v] : spec.env) env.push_back(k + "=" + v);
    std::vector<char*> envp, argv;
    for (auto& e : env) envp.push_back(e.data());
    envp.push_back(nullptr);
    std::vector<std::string> args = spec.agent_argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    posix_spawnattr_t attr;
    posix_spawnattr_init(&attr);
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSID);
    if (posix_spawn(&pid_, argv[0], &fa, &attr, argv.data(), envp.data()) != 0) pid_ = -1;
    posix_spawnattr_destroy(&attr);
    posix_spawn_file_actions_destroy(&fa);
  }
  ~AgentProcess() {
    if (pid_ > 0) {
      ::kill(-pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
  }
  int wait() {
    int status = 0;
    ::waitpid(pid_, &status, 0);
    pid_ = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }
  bool started() const { return pid_ > 0; }

 private:
  pid_t pid_ = -1;
};

TEST(AgentRelease, HeldWorkerGetsEnvAndFilesThenRuns) {
  char tmpl[] = "/tmp/muster-release-XXXXXX";
  const fs::path dir = mkdtemp(tmpl);
  muster::testing::FakeBackend backend;
  service::SystemClock clock;
  service::RegistryOptions ro;
  ro.state_dir = dir;
  ro.project_dir = dir;
  ro.agent_path = std::string(std::getenv("MUSTER_BINARY_DIR")) + "/bin/muster-agent";
  ro.heartbeat_interval = 200ms;
  ro.async_backend = false;
  service::HttpServerOptions ho;
  ho.port = service::pick_free_port("127.0.0.1").value();
  ro.daemon_port = ho.port;
  service::WorkerRegistry registry(ro, backend, nullptr, clock);
  service::Router router;
  service::register_agent_routes(router, registry);
  service::Authenticator auth("T", [&](const std::string& t) { return registry.worker_for_agent_token(t); });
  service::HttpServer server(ho, router, auth);
  ASSERT_TRUE(server.start().is_ok());

  service::LaunchBatch batch;
  batch.request.n = 1;
  batch.request.code =
      "import json, os\n"
      // Released files lie in the worker's directory; the script runs in the project.
      "spec = json.load(open(os.path.join(os.environ['MUSTER_WORKER_DIR'], 'cluster.json')))\n"
      "print('TF_CONFIG', os.environ['TF_CONFIG'], 'cluster', spec['ps'][0], 'port', os.environ['MUSTER_PORT'])\n"
      "print('cwd', os.getcwd(), 'worker dir', os.environ['MUSTER_WORKER_DIR'])\n"
      "assert not os.path.exists('cluster.json')\n"
      "assert 'MUSTER_AGENT_TOKEN' not in os.environ\n";
  batch.cluster_id = "c1";
  batch.per_worker = {service::WorkerExtras{{{"ROLE", "ps"}}, /*hold=*/true, /*reserve_port=*/true}};
  auto launched = registry.launch(batch);
  ASSERT_TRUE(launched.is_ok());
  const std::string id = launched.value()[0].id;
  AgentProcess agent(backend.launched.at(0));
  ASSERT_TRUE(agent.started());

  // Wait (on the registry) until the agent registered with a reserved port.
  std::optional<int> port;
  for (auto deadline = std::chrono::steady_clock::now() + 20s; std::chrono::steady_clock::now() < deadline;) {
    auto w = registry.get(id).value();
    if (w.status == api::WorkerStatus::kRunning && w.port) {
      port = w.port;
      break;
    }
    std::this_thread::sleep_for(20ms);
  }
  ASSERT_TRUE(port.has_value()) << "the agent did not register";
  EXPECT_EQ(registry.get(id)->ip_address, "127.0.0.1");
  std::this_thread::sleep_for(300ms);  // the agent is in wait-release now; nothing ran yet
  EXPECT_FALSE(registry.get(id)->exit_code.has_value());

  const std::string cluster = "{\"ps\": [\"127.0.0.1:" + std::to_string(*port) + "\"]}";
  ASSERT_TRUE(registry.release(id, {{{"TF_CONFIG", "{\"task\":{\"type\":\"ps\"}}"}}, {{"cluster.json", cluster}}}).is_ok());
  EXPECT_EQ(agent.wait(), 0);
  auto w = registry.get(id).value();
  EXPECT_EQ(w.status, api::WorkerStatus::kSucceeded) << w.reason;
  std::ifstream log(dir / "workers" / id / "output.log");
  const std::string text((std::istreambuf_iterator<char>(log)), {});
  EXPECT_NE(text.find("TF_CONFIG {\"task\":{\"type\":\"ps\"}} cluster 127.0.0.1:" + std::to_string(*port) + " port " +
                      std::to_string(*port)),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("cwd " + fs::canonical(dir).string() + " worker dir " +
                      fs::canonical(dir / "workers" / id).string()),
            std::string::npos)
      << text;
  server.stop();
  fs::remove_all(dir);
}

}  // namespace
