// GPU reservation with a fake inventory (no GPU needed): GpuInventory's
// all-or-nothing reserve, the parsers behind --gpus and nvidia-smi -L, and
// the registry handing devices to workers (CUDA_VISIBLE_DEVICES), taking
// them back on exit and again after a daemon restart.
#include "service/gpu_inventory.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "fake_backend.h"
#include "service/registry/registry.h"

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using muster::api::ErrorCode;
using muster::api::WorkerStatus;
using muster::service::FakeClock;
using muster::service::GpuInventory;
using muster::service::LaunchBatch;
using muster::service::RegistryOptions;
using muster::service::Store;
using muster::service::WorkerRegistry;
using muster::testing::FakeBackend;

namespace {

TEST(GpuInventory, ReservesLowestFreeAllOrNothing) {
  GpuInventory gpus({3, 0, 1, 2});
  EXPECT_EQ(gpus.devices(), (std::vector<int>{0, 1, 2, 3}));
  auto a = gpus.reserve({{"a", 1}, {"b", 2}});
  ASSERT_TRUE(a.is_ok());
  EXPECT_EQ(a.value(), (std::vector<std::vector<int>>{{0}, {1, 2}}));
  EXPECT_EQ(gpus.free_count(), 1);
  // Two more wanted, one free: nothing is taken, and the message says so.
  auto b = gpus.reserve({{"c", 1}, {"d", 1}});
  ASSERT_FALSE(b.is_ok());
  EXPECT_EQ(b.status().code(), ErrorCode::kConflict);
  EXPECT_EQ(b.status().field(), "nvidia_gpu");
  EXPECT_NE(b.status().message().find("needs 2 GPUs (2 workers x 1) but only 1 of the 4 GPUs of this host is free"),
            std::string::npos)
      << b.status().message();
  EXPECT_EQ(gpus.free_count(), 1);
  gpus.release("b");
  gpus.release("b");  // idempotent
  EXPECT_EQ(gpus.free_count(), 3);
  auto c = gpus.reserve({{"c", 3}});
  ASSERT_TRUE(c.is_ok());
  EXPECT_EQ(c.value()[0], (std::vector<int>{1, 2, 3}));
  EXPECT_TRUE(gpus.reserve({{"z", 0}}).is_ok());  // nothing wanted, nothing needed
}

TEST(GpuInventory, EmptyInventoryRefusesAndSaysHowToGetOne) {
  GpuInventory none;
  auto r = none.reserve({{"a", 1}});
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("only 0 of the 0 GPUs"), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find("--gpus"), std::string::npos);
}

TEST(GpuInventory, AdoptMarksDevicesHeld) {
  GpuInventory gpus({0, 1});
  gpus.adopt("old", {1});
  auto r = gpus.reserve({{"new", 1}});
  ASSERT_TRUE(r.is_ok());
  EXPECT_EQ(r.value()[0], (std::vector<int>{0}));
  EXPECT_FALSE(gpus.reserve({{"more", 1}}).is_ok());
}

TEST(GpuInventory, Parsers) {
  EXPECT_EQ(muster::service::parse_gpu_list("0,1,3").value(), (std::vector<int>{0, 1, 3}));
  EXPECT_TRUE(muster::service::parse_gpu_list("").value().empty());
  for (const char* bad : {"0,,1", "a", "-1", "0,0", "1.5", "0, 1"}) {
    auto r = muster::service::parse_gpu_list(bad);
    ASSERT_FALSE(r.is_ok()) << bad;
    EXPECT_NE(r.status().message().find("--gpus"), std::string::npos);
  }
  const std::string smi =
      "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-1234)\n"
      "GPU 1: NVIDIA H100 80GB HBM3 (UUID: GPU-5678)\n"
      "  MIG 1g.10gb Device 0: (UUID: MIG-abcd)\n";
  EXPECT_EQ(muster::service::parse_nvidia_smi_list(smi), (std::vector<int>{0, 1}));
  EXPECT_TRUE(muster::service::parse_nvidia_smi_list("NVIDIA-SMI has failed\n").empty());
  EXPECT_EQ(muster::service::device_list({0, 2}), "0,2");
  EXPECT_EQ(muster::service::parse_device_list("0,2"), (std::vector<int>{0, 2}));
}

class RegistryGpus : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/muster-gpus-XXXXXX";
    dir_ = mkdtemp(tmpl);
    options_.state_dir = dir_;
    options_.project_dir = dir_;
    options_.agent_path = "/bin/muster-agent";
    options_.daemon_port = 9;
    options_.async_backend = false;
    options_.gpus = &gpus_;
    store_ = std::move(Store::open(":memory:")).value();
    registry_ = std::make_unique<WorkerRegistry>(options_, backend_, store_.get(), clock_);
  }
  void TearDown() override {
    registry_.reset();
    fs::remove_all(dir_);
  }
  muster::api::Result<std::vector<muster::api::Worker>> launch(int n, int gpus) {
    LaunchBatch b;
    b.request.n = n;
    b.request.nvidia_gpu = gpus;
    b.request.code = "print(1)";
    return registry_->launch(b);
  }

  fs::path dir_;
  GpuInventory gpus_{{0, 1}};
  RegistryOptions options_;
  FakeClock clock_;
  FakeBackend backend_;
  std::unique_ptr<Store> store_;
  std::unique_ptr<WorkerRegistry> registry_;
};

TEST_F(RegistryGpus, WorkersGetDistinctDevicesAndTheThirdIsRefused) {
  auto a = launch(1, 1);
  auto b = launch(1, 1);
  ASSERT_TRUE(a.is_ok() && b.is_ok());
  ASSERT_EQ(backend_.launched.size(), 2u);
  EXPECT_EQ(backend_.launched[0].env.at("CUDA_VISIBLE_DEVICES"), "0");
  EXPECT_EQ(backend_.launched[0].env.at("NVIDIA_VISIBLE_DEVICES"), "0");
  EXPECT_EQ(backend_.launched[1].env.at("CUDA_VISIBLE_DEVICES"), "1");
  EXPECT_EQ(a->at(0).gpu_devices, "0");
  EXPECT_EQ(registry_->get(b->at(0).id)->gpu_devices, "1");
  auto c = launch(1, 1);
  ASSERT_FALSE(c.is_ok());
  EXPECT_EQ(c.status().code(), ErrorCode::kConflict);
  EXPECT_NE(c.status().message().find("only 0 of the 2 GPUs"), std::string::npos) << c.status().message();
  EXPECT_EQ(registry_->list().size(), 2u);  // the refused launch left nothing
  EXPECT_EQ(backend_.launched.size(), 2u);
  // A CPU worker needs none and sets none.
  ASSERT_TRUE(launch(1, 0).is_ok());
  EXPECT_EQ(backend_.launched.back().env.count("CUDA_VISIBLE_DEVICES"), 0u);
  // Devices come back when the worker ends (here: stopped).
  ASSERT_TRUE(registry_->stop({a->at(0).id}).is_ok());
  auto d = launch(1, 1);
  ASSERT_TRUE(d.is_ok()) << d.status().message();
  EXPECT_EQ(d->at(0).gpu_devices, "0");
}

TEST_F(RegistryGpus, BatchIsAllOrNothing) {
  auto r = launch(3, 1);
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("needs 3 GPUs (3 workers x 1) but only 2"), std::string::npos)
      << r.status().message();
  EXPECT_TRUE(registry_->list().empty());
  EXPECT_TRUE(store_->load_all()->empty());
  EXPECT_EQ(gpus_.free_count(), 2);
  auto two = launch(1, 2);
  ASSERT_TRUE(two.is_ok());
  EXPECT_EQ(backend_.launched.back().env.at("CUDA_VISIBLE_DEVICES"), "0,1");
}

TEST_F(RegistryGpus, ExitAndBackendFailureReturnDevices) {
  auto a = launch(1, 2);
  ASSERT_TRUE(a.is_ok());
  const std::string id = a->at(0).id;
  ASSERT_TRUE(registry_->agent_register(id, "127.0.0.1", std::nullopt).is_ok());
  ASSERT_TRUE(registry_->agent_exit(id, 0).is_ok());
  EXPECT_EQ(gpus_.free_count(), 2);
  // The backend refuses the launch: the worker fails, and its devices go back.
  backend_.fail_launch = muster::api::internal_error("no");
  auto b = launch(1, 2);
  ASSERT_TRUE(b.is_ok());
  EXPECT_EQ(registry_->get(b->at(0).id)->status, muster::api::WorkerStatus::kFailed);
  EXPECT_EQ(gpus_.free_count(), 2);
}

TEST_F(RegistryGpus, RestartedDaemonKeepsRunningWorkersDevices) {
  auto a = launch(1, 1);
  auto b = launch(1, 1);
  ASSERT_TRUE(a.is_ok() && b.is_ok());
  ASSERT_TRUE(registry_->agent_register(a->at(0).id, "127.0.0.1", std::nullopt).is_ok());
  ASSERT_TRUE(registry_->agent_register(b->at(0).id, "127.0.0.1", std::nullopt).is_ok());
  ASSERT_TRUE(registry_->agent_exit(b->at(0).id, 0).is_ok());
  registry_.reset();

  GpuInventory fresh({0, 1});
  RegistryOptions o = options_;
  o.gpus = &fresh;
  FakeBackend backend;
  WorkerRegistry restored(o, backend, store_.get(), clock_);
  ASSERT_TRUE(restored.restore().is_ok());
  EXPECT_EQ(restored.get(a->at(0).id)->gpu_devices, "0");
  EXPECT_EQ(fresh.free_count(), 1);  // a still holds 0; b's 1 is free
  LaunchBatch batch;
  batch.request.nvidia_gpu = 1;
  batch.request.code = "print(1)";
  auto c = restored.launch(batch);
  ASSERT_TRUE(c.is_ok()) << c.status().message();
  EXPECT_EQ(c->at(0).gpu_devices, "1");
}

}  // namespace
