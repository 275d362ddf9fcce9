// WorkerRegistry under the conditions issue 12 found it failing in: a
// backend whose poll() takes seconds (it used to run under the registry's
// mutex, stalling every API call), stop() of 50k duplicate ids (a thread per
// id), and a state database that cannot be written (errors were ignored and
// memory ran ahead of the store).
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
#include "service/registry.h"

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

  backend_.stop_time = 30ms;
  const auto many = ids(40);
  ASSERT_TRUE(registry_->stop(many).is_ok());
  EXPECT_EQ(backend_.stops, 41);
  EXPECT_LE(backend_.max_running.load(), 8);
  EXPECT_GE(backend_.max_running.load(), 2) << "stops should still run in parallel";
  EXPECT_LE(backend_.threads.size(), 9u);
}

// The state database's files cannot be written (RLIMIT_FSIZE 0 stands for a
// full disk; it holds for root too): every write fails, and each call that needs
// one fails naming the store, with nothing changed in memory or on disk.
TEST_F(RegistryHardeningTest, AStoreThatCannotBeWrittenFailsTheCallAndChangesNothing) {
  const std::string db = (dir_ / "musterd.db").string();
  open(db);
  const auto first = ids(1).at(0);
  ::signal(SIGXFSZ, SIG_IGN);
  rlimit old{};
  ::getrlimit(RLIMIT_FSIZE, &old);
  rlimit tight = old;
  tight.rlim_cur = 0;  // no write to a regular file succeeds (pipes and sockets are not limited)
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &tight), 0);

  auto launched = launch(3);
  auto reg = registry_->agent_register(first, "10.0.0.1", std::nullopt);
  auto stop = registry_->stop({first});

  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &old), 0);
  ASSERT_FALSE(launched.is_ok());
  EXPECT_NE(launched.status().message().find("state database"), std::string::npos) << launched.status().message();
  EXPECT_EQ(registry_->list().size(), 1u) << "a launch that was not stored left workers behind";
  ASSERT_FALSE(reg.is_ok()) << "a registration that was not stored succeeded";
  EXPECT_NE(reg.status().message().find("state database"), std::string::npos) << reg.status().message();
  EXPECT_FALSE(stop.is_ok());
  EXPECT_EQ(registry_->get(first)->status, WorkerStatus::kStarting);
  EXPECT_EQ(registry_->get(first)->ip_address, "unknown");
  EXPECT_EQ(backend_.stops, 0) << "the process was stopped although the stop was not stored";

  // Once the disk has room again, everything works and a restart agrees.
  EXPECT_TRUE(registry_->agent_register(first, "10.0.0.1", std::nullopt).is_ok());
  open(db);
  ASSERT_TRUE(registry_->restore().is_ok());
  ASSERT_EQ(registry_->list().size(), 1u);
  EXPECT_EQ(registry_->get(first)->status, WorkerStatus::kRunning);
}

}  // namespace
