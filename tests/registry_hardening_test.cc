// WorkerRegistry under hostile conditions: a backend whose poll() takes
// seconds (it must never run under the registry's mutex, stalling every API
// call), stop() of 50k duplicate ids, and a state database that cannot be
// written (a full disk: launches are refused whole, every other change is
// kept in memory, written again later, and logged once).
#include <signal.h>
#include <sys/resource.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <future>
#include <set>
#include <thread>

#include <gtest/gtest.h>

#include "fake_backend.h"
#include "service/registry/registry.h"

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using muster::api::WorkerStatus;
using muster::service::FakeClock;
using muster::service::LaunchBatch;
using muster::service::RegistryOptions;
using muster::service::Store;
using muster::service::WorkerRegistry;

namespace {

// poll() can be made to block until released; stop() counts its calls, the
// threads they came on and how many ran at once.
class SlowBackend final : public muster::workers::Backend {
 public:
  std::string name() const override { return "slow"; }
  std::string master_address() const override { return "127.0.0.1"; }
  muster::api::Status launch(const std::vector<muster::workers::LaunchSpec>&) override {
    return muster::api::Status::ok();
  }
  muster::api::Status stop(const std::string&, std::chrono::milliseconds) override {
    const int now = ++running;
    int seen = max_running.load();
    while (now > seen && !max_running.compare_exchange_weak(seen, now)) {
    }
    {
      std::lock_guard<std::mutex> lock(mu);
      threads.insert(std::this_thread::get_id());
      ++stops;
    }
    std::this_thread::sleep_for(stop_time);
    --running;
    return muster::api::Status::ok();
  }
  muster::workers::ProcessStatus poll(const std::string&) override {
    if (block_poll) {
      polling = true;
      release.get_future().wait();
    }
    return {muster::workers::ProcessState::kRunning, std::nullopt};
  }
  void shutdown() override {}

  std::atomic<bool> block_poll{false}, polling{false};
  std::promise<void> release;
  std::chrono::milliseconds stop_time{0};
  std::atomic<int> running{0}, max_running{0};
  std::mutex mu;
  std::set<std::thread::id> threads;
  int stops = 0;
};

class RegistryHardeningTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/muster-harden-registry-XXXXXX";
    dir_ = mkdtemp(tmpl);
    options_.state_dir = dir_;
    options_.project_dir = dir_;
    options_.agent_path = "/bin/muster-agent";
    options_.daemon_port = 9;
    options_.async_backend = false;
  }
  void TearDown() override {
    registry_.reset();
    store_.reset();
    fs::remove_all(dir_);
  }
  void open(const std::string& db = ":memory:") {
    registry_.reset();
    store_.reset();
    auto store = Store::open(db);
    ASSERT_TRUE(store.is_ok()) << store.status().message();
    store_ = std::move(store).value();
    registry_ = std::make_unique<WorkerRegistry>(options_, backend_, store_.get(), clock_);
  }
  muster::api::Result<std::vector<muster::api::Worker>> launch(int n, const std::string& script = "train.py") {
    LaunchBatch b;
    b.request.n = n;
    b.request.script = script;
    b.request.script_path = dir_ / script;
    return registry_->launch(b);
  }
  std::vector<std::string> ids(int n) {
    auto r = launch(n);
    EXPECT_TRUE(r.is_ok()) << r.status().message();
    std::vector<std::string> out;
    for (const auto& w : r.value()) out.push_back(w.id);
    return out;
  }

  fs::path dir_;
  RegistryOptions options_;
  FakeClock clock_;
  muster::service::StoreHealth health_;
  SlowBackend backend_;
  std::unique_ptr<Store> store_;
  std::unique_ptr<WorkerRegistry> registry_;
};

TEST_F(RegistryHardeningTest, ASlowPollNeverStallsOtherCalls) {
  open();
  const auto id = ids(1).at(0);
  backend_.block_poll = true;
  std::thread ticker([&] { registry_->tick(); });
  while (!backend_.polling) std::this_thread::sleep_for(1ms);
  // While tick() waits on the backend, the API and the agents carry on.
  auto calls = std::async(std::launch::async, [&] {
    EXPECT_TRUE(registry_->get(id).is_ok());
    EXPECT_TRUE(registry_->agent_register(id, "10.0.0.1", std::nullopt).is_ok());
    EXPECT_TRUE(registry_->agent_heartbeat(id).is_ok());
    EXPECT_EQ(registry_->list().size(), 1u);
  });
  const bool prompt = calls.wait_for(2s) == std::future_status::ready;
  backend_.release.set_value();
  ticker.join();
  calls.wait();
  EXPECT_TRUE(prompt) << "registry calls waited for the backend's poll()";
  // What tick() saw before the registration does not undo it.
  EXPECT_EQ(registry_->get(id)->status, WorkerStatus::kRunning);
}

TEST_F(RegistryHardeningTest, StopDedupesIdsAndBoundsItsThreads) {
  open();
  const auto one = ids(1).at(0);
  const std::vector<std::string> dupes(50'000, one);
  const auto start = std::chrono::steady_clock::now();
  auto stopped = registry_->stop(dupes);
  const auto took = std::chrono::steady_clock::now() - start;
  ASSERT_TRUE(stopped.is_ok()) << stopped.status().message();
  EXPECT_EQ(stopped.value().size(), 1u);
  EXPECT_EQ(backend_.stops, 1) << "one worker, stopped once";
  EXPECT_LT(took, 2s);

  // Backend::stop only signals (the grace runs on the backend's own
  // threads), so the registry calls it in turn on the caller's thread: no
  // thread per worker, however many.
  const auto many = ids(40);
  ASSERT_TRUE(registry_->stop(many).is_ok());
  EXPECT_EQ(backend_.stops, 41);
  EXPECT_EQ(backend_.max_running.load(), 1);
  EXPECT_EQ(backend_.threads.size(), 1u);
}

// The state database's files cannot be written (RLIMIT_FSIZE 0 stands for a
// full disk; it holds for root too). A launch is refused whole: no record,
// row or directory of it stays. Every later change still happens, in memory
// first: registration, a stop (the process is signalled), a clean exit (a
// success, never "failed"). The store's health reports one failing episode
// however many writes fail; once writes succeed again, tick() writes what
// was kept, and a restarted daemon agrees.
TEST_F(RegistryHardeningTest, AFullDiskNeverKeepsAStopFromSignallingNorFailsACleanExit) {
  const std::string db = (dir_ / "musterd.db").string();
  open(db);
  store_->set_health(&health_);
  const auto first = ids(1).at(0);
  const auto second = ids(1).at(0);
  ASSERT_TRUE(registry_->agent_register(second, "10.0.0.2", std::nullopt).is_ok());
  auto worker_dirs = [&] {
    size_t n = 0;
    for (auto it = fs::directory_iterator(dir_ / "workers"); it != fs::directory_iterator(); ++it) ++n;
    return n;
  };
  ::signal(SIGXFSZ, SIG_IGN);
  rlimit old{};
  ::getrlimit(RLIMIT_FSIZE, &old);
  rlimit tight = old;
  tight.rlim_cur = 0;  // no write to a regular file succeeds (pipes and sockets are not limited)
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &tight), 0);

  auto launched = launch(3);
  auto reg = registry_->agent_register(first, "10.0.0.1", std::nullopt);
  auto stop = registry_->stop({first});
  auto exited = registry_->agent_exit(second, 0);
  registry_->tick();
  const auto problem = health_.problem();

  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &old), 0);
  ASSERT_FALSE(launched.is_ok());
  EXPECT_NE(launched.status().message().find("state database"), std::string::npos) << launched.status().message();
  EXPECT_EQ(registry_->list().size(), 2u) << "a launch that was not stored left workers behind";
  EXPECT_EQ(worker_dirs(), 2u) << "a launch that was not stored left directories behind";
  EXPECT_TRUE(reg.is_ok()) << reg.status().message();
  ASSERT_TRUE(stop.is_ok()) << stop.status().message();
  EXPECT_EQ(registry_->get(first)->status, WorkerStatus::kStopped);
  EXPECT_EQ(backend_.stops, 1) << "the stop did not signal the process";
  EXPECT_TRUE(exited.is_ok()) << exited.message();
  EXPECT_EQ(registry_->get(second)->status, WorkerStatus::kSucceeded);
  ASSERT_TRUE(problem.has_value());
  EXPECT_NE(problem->find("state database"), std::string::npos) << *problem;
  EXPECT_EQ(health_.episodes(), 1u) << "one episode, logged once";
  EXPECT_GT(registry_->dirty_records(), 0u);

  // Room again: the next tick writes what memory kept.
  registry_->tick();
  EXPECT_EQ(registry_->dirty_records(), 0u);
  EXPECT_FALSE(health_.problem().has_value());
  open(db);
  ASSERT_TRUE(registry_->restore().is_ok());
  ASSERT_EQ(registry_->list().size(), 2u);
  EXPECT_EQ(registry_->get(first)->status, WorkerStatus::kStopped);
  EXPECT_EQ(registry_->get(second)->status, WorkerStatus::kSucceeded);
}

}  // namespace
