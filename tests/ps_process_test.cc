// Real muster-ps processes configured through TF_CONFIG, with the workers
// (threads of this test) reading their cluster from TF_CONFIG JSON too.
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <thread>

#include <boost/asio.hpp>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "runtime/error.h"
#include "ps_test_model.h"

extern char** environ;

namespace muster::runtime::ps::testing {
namespace {

unsigned short free_port() {
  boost::asio::io_context io;
  boost::asio::ip::tcp::acceptor a(io, {boost::asio::ip::make_address("127.0.0.1"), 0});
  return a.local_endpoint().port();
}

// A child process that is killed (and reaped) if the test ends early.
class Child {
 public:
  Child(const std::string& program, const std::string& tf_config, int timeout_ms, const std::string& secret = "") {
    std::vector<std::string> env_strings{"TF_CONFIG=" + tf_config, "MUSTER_PS_TIMEOUT_MS=" + std::to_string(timeout_ms)};
    if (!secret.empty()) env_strings.push_back("MUSTER_PS_SECRET=" + secret);
    for (char** e = environ; *e; ++e) {
      std::string s(*e);
      if (s.rfind("TF_CONFIG=", 0) != 0 && s.rfind("MUSTER_PS_TIMEOUT_MS=", 0) != 0 && s.rfind("MUSTER_PS_SECRET=", 0) != 0) {
        env_strings.push_back(s);
      }
    }
    std::vector<char*> env;
    for (auto& s : env_strings) env.push_back(s.data());
    env.push_back(nullptr);
    std::string prog = program;
    char* argv[] = {prog.data(), nullptr};
    if (posix_spawn(&pid_, program.c_str(), nullptr, nullptr, argv, env.data()) != 0) pid_ = -1;
  }
  ~Child() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
  }
  pid_t pid() const { return pid_; }
  void kill() { ::kill(pid_, SIGKILL); }
  // Exit status, or -1 if still running after `ms`.
  int wait_exit(int ms) {
    for (int waited = 0; waited <= ms; waited += 20) {
      int status = 0;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return -1;
  }

 private:
  pid_t pid_ = -1;
};

struct Job {
  nlohmann::json cluster;
  std::vector<std::unique_ptr<Child>> ps;
  Job(int n_ps, int n_workers, int timeout_ms, const std::string& secret = "") {
    for (int i = 0; i < n_ps; ++i) cluster["ps"].push_back("127.0.0.1:" + std::to_string(free_port()));
    cluster["chief"].push_back("127.0.0.1:" + std::to_string(free_port()));
    for (int i = 1; i < n_workers; ++i) cluster["worker"].push_back("127.0.0.1:" + std::to_string(free_port()));
    const std::string program = std::string(std::getenv("MUSTER_BINARY_DIR")) + "/bin/muster-ps";
    for (int i = 0; i < n_ps; ++i) {
      ps.push_back(std::make_unique<Child>(program, tf_config("ps", i), timeout_ms, secret));
      EXPECT_GT(ps.back()->pid(), 0) << "cannot start " << program;
    }
  }
  std::string tf_config(const std::string& type, int index) const {
    return nlohmann::json{{"cluster", cluster}, {"task", {{"type", type}, {"index", index}}}}.dump();
  }
  // Worker w of the training tasks: the chief, then worker 0, 1, ...
  PsCluster worker_cluster(int w) const {
    return PsCluster::from_tf_config(w == 0 ? tf_config("chief", 0) : tf_config("worker", w - 1));
  }
};

TEST(PsProcess, MusterPsServesATfConfigJobAndExitsZeroWhenAllAreDone) {
  const std::string secret = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08";
  Job job(2, 2, 20000, secret);  // as musterd starts it: MUSTER_PS_SECRET set
  ClientOptions opt = small_slices({});
  opt.optimizer = "momentum";
  opt.learning_rate = 0.05f;
  {
    ClientOptions wrong = opt;
    wrong.secret = "";  // a client outside the cluster
    Model m;
    SyncReplicasClient intruder(job.worker_cluster(0), wrong);
    intruder.register_variables({{"w", m.w.data(), m.w.size()}, {"b", m.b.data(), m.b.size()}});
    try {
      intruder.initialize_or_wait();
      ADD_FAILURE() << "muster-ps served a client without the cluster's secret";
    } catch (const CommError& e) {
      EXPECT_NE(std::string(e.what()).find("wrong or missing secret"), std::string::npos) << e.what();
    }
  }
  opt.secret = secret;
  const int64_t steps = 15;
  std::vector<Model> models(2);
  std::vector<std::string> errors(2);
  std::vector<std::thread> threads;
  for (int w = 0; w < 2; ++w) {
    threads.emplace_back([&, w] {
      try {
        SyncReplicasClient client(job.worker_cluster(w), opt);
        EXPECT_EQ(client.is_chief(), w == 0);
        Model& m = models[w];
        client.register_variables({{"w", m.w.data(), m.w.size()}, {"b", m.b.data(), m.b.size()}});
        int64_t step = client.initialize_or_wait();
        std::vector<float> dw, db;
        while (step < steps) {
          gradients(m, step, w * 4, 4, &dw, &db);
          step = client.step({dw.data(), db.data()});
        }
        client.done();
      } catch (const std::exception& e) {
        errors[w] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (auto& e : errors) ASSERT_EQ(e, "");
  Model expected = reference("momentum", 0.05f, steps, 8);
  EXPECT_LT(max_abs_diff(models[0].w, expected.w), 1e-4f);
  EXPECT_LT(max_abs_diff(models[1].b, expected.b), 1e-4f);
  for (auto& p : job.ps) EXPECT_EQ(p->wait_exit(10000), 0) << "muster-ps must exit 0 once every worker is done";
}

TEST(PsProcess, AKilledPsTaskIsNamedInTheWorkersError) {
  Job job(2, 1, 3000);
  ClientOptions opt = small_slices({});
  opt.timeout_ms = 3000;
  Model m;
  SyncReplicasClient client(job.worker_cluster(0), opt);
  client.register_variables({{"w", m.w.data(), m.w.size()}, {"b", m.b.data(), m.b.size()}});
  client.initialize_or_wait();
  std::vector<float> dw, db;
  gradients(m, 0, 0, 4, &dw, &db);
  ASSERT_EQ(client.step({dw.data(), db.data()}), 1);
  job.ps[1]->kill();
  const std::string name = "ps task 1 (" + job.cluster["ps"][1].get<std::string>() + ")";
  try {
    for (int i = 0; i < 3; ++i) client.step({dw.data(), db.data()});
    FAIL() << "steps went on with a dead PS";
  } catch (const CommError& e) {
    EXPECT_NE(std::string(e.what()).find(name), std::string::npos) << e.what();
  }
}

TEST(PsProcess, MusterPsExitsNonZeroWhenAWorkerIsMissingWithoutBackups) {
  Job job(1, 2, 1000);  // the second worker never starts
  ClientOptions opt = small_slices({});
  opt.timeout_ms = 1000;
  Model m;
  SyncReplicasClient chief(job.worker_cluster(0), opt);
  chief.register_variables({{"w", m.w.data(), m.w.size()}, {"b", m.b.data(), m.b.size()}});
  chief.initialize_or_wait();
  std::vector<float> dw, db;
  gradients(m, 0, 0, 4, &dw, &db);
  try {
    chief.step({dw.data(), db.data()});
    FAIL() << "a step completed without the second worker";
  } catch (const TimeoutError& e) {
    EXPECT_NE(std::string(e.what()).find("ps task 0"), std::string::npos) << e.what();
  }
  EXPECT_EQ(job.ps[0]->wait_exit(10000), 1) << "muster-ps must fail, not wait forever";
}

TEST(PsProcess, MusterPsRejectsATfConfigForAnotherTaskType) {
  Job job(0 + 1, 1, 1000);
  job.ps[0]->kill();
  job.ps[0]->wait_exit(2000);
  Child wrong(std::string(std::getenv("MUSTER_BINARY_DIR")) + "/bin/muster-ps", job.tf_config("chief", 0), 1000);
  EXPECT_EQ(wrong.wait_exit(10000), 1);
}

}  // namespace
}  // namespace muster::runtime::ps::testing
