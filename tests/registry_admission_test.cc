// Admission (service/admission.h, service/registry/registry.h "Admission"): the CPUs and
// memory of a launch counted with the workers already on the host. With
// overcommit (the default) a launch past the host runs with a warning naming
// the totals; without it, workers that do not fit wait in `scheduling` with
// the reason and start once others end, a cluster's launch all at once or
// not at all. The backend is tests/fake_backend.h, inline (async_backend =
// false), so each assertion sees exactly what the registry asked it.
#include <gtest/gtest.h>

#include "fake_backend.h"
#include "temp_dir.h"
#include "service/admission.h"
#include "service/registry/registry.h"

using muster::api::ErrorCode;
using muster::api::WorkerStatus;
using muster::service::Demand;
using muster::service::FakeClock;
using muster::service::HostCapacity;
using muster::service::LaunchBatch;
using muster::service::RegistryOptions;
using muster::service::WorkerRegistry;
using muster::testing::FakeBackend;
namespace service = muster::service;

namespace {

class AdmissionTest : public ::testing::Test {
 protected:
  void start(HostCapacity host, bool overcommit) {
    options_.state_dir = dir_.path();
    options_.project_dir = dir_.path();
    options_.agent_path = "/bin/muster-agent";
    options_.daemon_port = 9;
    options_.async_backend = false;
    options_.capacity = host;
    options_.overcommit = overcommit;
    registry_ = std::make_unique<WorkerRegistry>(options_, backend_, nullptr, clock_);
  }
  static LaunchBatch batch(int n, double cpu, double memory, std::optional<std::string> cluster = std::nullopt) {
    LaunchBatch b;
    b.request.n = n;
    b.request.cpu = cpu;
    b.request.memory = memory;
    b.request.code = "print(1)";
    b.cluster_id = cluster;
    return b;
  }
  // Launches; the ids, and what the caller was warned of in `warnings_`.
  std::vector<std::string> launch(int n, double cpu, double memory) {
    warnings_.clear();
    auto r = registry_->launch(batch(n, cpu, memory), &warnings_);
    EXPECT_TRUE(r.is_ok()) << r.status().message();
    std::vector<std::string> ids;
    if (r) {
      for (const auto& w : r.value()) ids.push_back(w.id);
    }
    return ids;
  }
  muster::api::Worker get(const std::string& id) { return registry_->get(id).value(); }
  size_t launched() {
    std::lock_guard<std::mutex> lock(backend_.mu);
    return backend_.launched.size();
  }
  void end(const std::string& id) { ASSERT_TRUE(registry_->stop({id}).is_ok()); }

  muster::testing::TempDir dir_{"muster-admission"};
  RegistryOptions options_;
  FakeClock clock_;
  FakeBackend backend_;
  std::unique_ptr<WorkerRegistry> registry_;
  std::vector<std::string> warnings_;
};

TEST(Admission, Arithmetic) {
  const HostCapacity host{2, 8.0};
  EXPECT_FALSE(service::shortfall(host, {1.0, 4.0}, {1.0, 4.0}).any());
  // Ten workers of cpu=0.2 fill two CPUs exactly, rounding or not.
  Demand tenths;
  for (int i = 0; i < 10; ++i) tenths += Demand{0.2, 0.1};
  EXPECT_FALSE(service::shortfall(host, {}, tenths).any());
  const auto s = service::shortfall(host, {2.0, 7.0}, {2.0, 3.0});
  EXPECT_DOUBLE_EQ(s.cpus, 2.0);
  EXPECT_DOUBLE_EQ(s.memory_gb, 2.0);
  EXPECT_EQ(service::wait_reason(host, s),
            "waiting for 2 CPUs: 4 of 2 requested; waiting for 2 GB of memory: 10 of 8 GB requested");
  EXPECT_EQ(service::wait_reason(host, service::shortfall(host, {2.0, 0}, {1.0, 0})),
            "waiting for 1 CPU: 3 of 2 requested");
  // An unknown capacity admits everything.
  EXPECT_FALSE(service::shortfall(HostCapacity{}, {100, 100}, {100, 100}).any());
  EXPECT_GE(service::host_capacity().cpus, 1);
  EXPECT_GT(service::host_capacity().memory_gb, 0.1);
}

// The default: everything runs; the launch that passes the host is told the
// totals, counting the workers already there.
TEST_F(AdmissionTest, OvercommitRunsWithAWarningNamingTheTotals) {
  start({2, 8.0}, true);
  auto first = launch(1, 2, 1);
  EXPECT_TRUE(warnings_.empty());
  auto more = launch(2, 2, 1);
  ASSERT_EQ(warnings_.size(), 1u);
  EXPECT_EQ(warnings_[0],
            "this launch takes the host's CPUs past its capacity: 6 of 2 CPUs requested (2 by the workers already "
            "there, 4 by this launch); the workers share the CPUs (musterd --overcommit=false makes such workers "
            "wait until the host has room)");
  EXPECT_EQ(launched(), 3u);
  for (const auto& id : more) EXPECT_EQ(get(id).status, WorkerStatus::kStarting);
  launch(1, 0.5, 7.5);
  ASSERT_EQ(warnings_.size(), 1u);
  EXPECT_EQ(warnings_[0],
            "this launch takes the host's CPUs past its capacity: 6.5 of 2 CPUs requested (6 by the workers already "
            "there, 0.5 by this launch); the workers share the CPUs; this launch takes the host's memory past its "
            "capacity: 10.5 of 8 GB requested (3 GB by the workers already there, 7.5 GB by this launch); a worker "
            "that uses its share may be killed or swap (musterd --overcommit=false makes such workers wait until "
            "the host has room)");
  // Ended workers hold nothing.
  ASSERT_TRUE(registry_->stop({}).is_ok());
  launch(1, 2, 8);
  EXPECT_TRUE(warnings_.empty()) << warnings_[0];
}

// --overcommit=false: 3 workers of cpu=1 on 2 CPUs: the third waits with
// the reason, and starts once one ends.
TEST_F(AdmissionTest, WithoutOvercommitTheWorkerPastTheHostWaits) {
  start({2, 8.0}, false);
  auto ids = launch(3, 1, 1);
  ASSERT_EQ(ids.size(), 3u);
  ASSERT_EQ(warnings_.size(), 1u);
  EXPECT_EQ(warnings_[0],
            "1 of 3 worker(s) wait in scheduling until this host has room (musterd --overcommit=false): waiting for "
            "1 CPU: 3 of 2 requested");
  EXPECT_EQ(get(ids[0]).status, WorkerStatus::kStarting);
  EXPECT_EQ(get(ids[1]).status, WorkerStatus::kStarting);
  EXPECT_EQ(get(ids[2]).status, WorkerStatus::kScheduling);
  EXPECT_EQ(get(ids[2]).reason, "waiting for 1 CPU: 3 of 2 requested");
  EXPECT_EQ(launched(), 2u);
  // A later launch that does not fit waits too; the reasons count it.
  auto late = launch(1, 1, 1);
  EXPECT_EQ(get(late[0]).reason, "waiting for 1 CPU: 3 of 2 requested");
  registry_->tick();
  EXPECT_EQ(launched(), 2u) << "nothing ended, nothing starts";

  end(ids[0]);
  registry_->tick();
  EXPECT_EQ(launched(), 3u);
  EXPECT_EQ(backend_.launched.back().worker_id, ids[2]) << "the earlier launch goes first";
  EXPECT_EQ(get(ids[2]).status, WorkerStatus::kStarting);
  EXPECT_EQ(get(ids[2]).reason, "");
  EXPECT_EQ(get(late[0]).status, WorkerStatus::kScheduling);

  // A waiting worker that is stopped ends at once and never starts.
  end(late[0]);
  EXPECT_EQ(get(late[0]).status, WorkerStatus::kStopped);
  end(ids[1]);
  registry_->tick();
  EXPECT_EQ(launched(), 3u);
}

TEST_F(AdmissionTest, MemoryCountsToo) {
  start({8, 4.0}, false);
  auto a = launch(1, 1, 3);
  auto b = launch(1, 1, 3);
  EXPECT_EQ(get(b[0]).status, WorkerStatus::kScheduling);
  EXPECT_EQ(get(b[0]).reason, "waiting for 2 GB of memory: 6 of 4 GB requested");
  end(a[0]);
  registry_->tick();
  EXPECT_EQ(get(b[0]).status, WorkerStatus::kStarting);
}

// What could never fit is refused, leaving nothing behind.
TEST_F(AdmissionTest, WithoutOvercommitAnAskBeyondTheHostIsRefused) {
  start({2, 8.0}, false);
  auto r = registry_->launch(batch(1, 4, 1));
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), ErrorCode::kConflict);
  EXPECT_EQ(r.status().message(),
            "a worker: 4 CPUs asked for and this host has 2, so it could never start (musterd --overcommit=false); "
            "ask for less");
  auto c = registry_->launch_together({batch(1, 1, 1, "c-1"), batch(2, 1, 1, "c-1")});
  ASSERT_FALSE(c.is_ok());
  EXPECT_EQ(c.status().message(),
            "this cluster's 3 workers: 3 CPUs asked for and this host has 2, so it could never start (musterd "
            "--overcommit=false); ask for less");
  EXPECT_TRUE(registry_->list().empty());
  EXPECT_TRUE(std::filesystem::is_empty(dir_.path() / "workers"));
}

// A cluster's launch (every batch) waits whole and starts whole, in one
// backend call; a small worker that fits meanwhile is not held up by it.
TEST_F(AdmissionTest, AClusterWaitsWholeAndStartsWhole) {
  start({4, 8.0}, false);
  auto big = launch(1, 2, 1);
  std::vector<std::string> warnings;
  auto c = registry_->launch_together({batch(1, 1, 1, "c-1"), batch(2, 1, 1, "c-1")}, &warnings);
  ASSERT_TRUE(c.is_ok()) << c.status().message();
  ASSERT_EQ(c->size(), 2u);
  ASSERT_EQ(c.value()[0].size(), 1u);
  ASSERT_EQ(c.value()[1].size(), 2u);
  std::vector<std::string> tasks = {c.value()[0][0].id, c.value()[1][0].id, c.value()[1][1].id};
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_EQ(warnings[0],
            "3 of 3 worker(s) wait in scheduling until this host has room (musterd --overcommit=false): waiting for "
            "1 CPU: 5 of 4 requested");
  for (const auto& id : tasks) {
    EXPECT_EQ(get(id).status, WorkerStatus::kScheduling);
    EXPECT_EQ(get(id).reason, "waiting for 1 CPU: 5 of 4 requested");
  }
  EXPECT_EQ(launched(), 1u) << "no task of the cluster starts alone";

  auto small = launch(1, 1, 1);
  EXPECT_EQ(get(small[0]).status, WorkerStatus::kStarting);
  registry_->tick();
  for (const auto& id : tasks) EXPECT_EQ(get(id).reason, "waiting for 2 CPUs: 6 of 4 requested");

  end(big[0]);
  registry_->tick();
  EXPECT_EQ(launched(), 5u);
  for (const auto& id : tasks) {
    EXPECT_EQ(get(id).status, WorkerStatus::kStarting);
    EXPECT_EQ(get(id).reason, "");
  }
}

// Without a capacity (ssh, slurm) nothing is counted.
TEST_F(AdmissionTest, NoCapacityNoAdmission) {
  start({2, 8.0}, false);
  registry_.reset();
  options_.capacity.reset();
  registry_ = std::make_unique<WorkerRegistry>(options_, backend_, nullptr, clock_);
  auto ids = launch(4, 2, 100);
  EXPECT_TRUE(warnings_.empty());
  EXPECT_EQ(launched(), 4u);
}

}  // namespace
