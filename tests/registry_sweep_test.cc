// WorkerRegistry::tick()'s sweep (service/registry/tick.cc): up to
// sweep_all records are all visited every tick; past that, each tick visits
// 1/sweep_ticks of them, resuming where the last one stopped, so every
// worker is seen once per sweep_ticks ticks and none twice before all were
// seen. Seen here through what a visit does: an agent that died without
// reporting is failed, a silent one is lost. FakeClock, FakeBackend.
#include "service/registry/registry.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <set>

#include "registry_fixture.h"

using namespace std::chrono_literals;
using muster::api::WorkerStatus;

namespace {

class RegistrySweepTest : public muster::testing::RegistryFixture {
 protected:
  RegistrySweepTest() : RegistryFixture("muster-sweep") {}
  void start(size_t sweep_all, size_t sweep_ticks) {
    options_.heartbeat_timeout = 5s;
    options_.sweep_all = sweep_all;
    options_.sweep_ticks = sweep_ticks;
    RegistryFixture::start();
  }
  std::vector<std::string> launch_running(int n) { return RegistryFixture::launch_running(n, "127.0.0.1"); }
  size_t count(const std::vector<std::string>& ids, WorkerStatus s) {
    size_t n = 0;
    for (const auto& id : ids) n += registry_->get(id)->status == s;
    return n;
  }
};

TEST_F(RegistrySweepTest, UpToSweepAllEveryWorkerIsSeenEveryTick) {
  start(/*sweep_all=*/1000, /*sweep_ticks=*/10);
  const auto ids = launch_running(50);
  for (const auto& id : ids) backend_.set_exited(id, 137);
  registry_->tick();
  EXPECT_EQ(count(ids, WorkerStatus::kFailed), 50u);
}

TEST_F(RegistrySweepTest, PastSweepAllEachTickSeesItsSliceAndEveryWorkerIsSeenOncePerSweep) {
  start(/*sweep_all=*/4, /*sweep_ticks=*/5);
  const auto ids = launch_running(20);  // slices of 4
  for (const auto& id : ids) backend_.set_exited(id, 137);
  for (size_t tick = 1; tick <= 5; ++tick) {
    registry_->tick();
    EXPECT_EQ(count(ids, WorkerStatus::kFailed), 4 * tick) << "after tick " << tick;
  }
}

TEST_F(RegistrySweepTest, ASilentWorkerIsLostWithinOneSweepOfItsTimeout) {
  start(/*sweep_all=*/2, /*sweep_ticks=*/4);
  const auto ids = launch_running(8);  // slices of 2: a sweep is 4 ticks
  for (int i = 0; i < 4; ++i) registry_->tick();  // a whole sweep: all running
  EXPECT_EQ(count(ids, WorkerStatus::kRunning), 8u);
  clock_.advance(6s);  // past the heartbeat timeout for all of them
  std::set<std::string> lost_after_first;
  registry_->tick();
  for (const auto& id : ids) {
    if (registry_->get(id)->status == WorkerStatus::kLost) lost_after_first.insert(id);
  }
  EXPECT_EQ(lost_after_first.size(), 2u) << "one slice per tick";
  for (int i = 0; i < 3; ++i) registry_->tick();
  EXPECT_EQ(count(ids, WorkerStatus::kLost), 8u) << "every worker within one sweep";
}

TEST_F(RegistrySweepTest, TheSweepResumesAcrossWorkersThatCameAndWent) {
  start(/*sweep_all=*/3, /*sweep_ticks=*/3);
  auto ids = launch_running(9);
  registry_->tick();  // the cursor is somewhere in the middle now
  ASSERT_TRUE(registry_->stop({ids[0], ids[4]}).is_ok());
  const auto more = launch_running(3);
  ids.insert(ids.end(), more.begin(), more.end());
  for (const auto& id : ids) backend_.set_exited(id, 137);
  // 12 records (2 stopped): slices of max(3, 4) = 4; three ticks see them all.
  for (int i = 0; i < 3; ++i) registry_->tick();
  EXPECT_EQ(count(ids, WorkerStatus::kFailed), 10u);
  EXPECT_EQ(count(ids, WorkerStatus::kStopped), 2u);
}

}  // namespace
