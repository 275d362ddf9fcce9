// NCCL allreduce/broadcast of device buffers under mpirun (one GPU per rank).
// Built only with MUSTER_WITH_NCCL; skipped (reported as skipped) when this
// host has fewer CUDA devices than ranks, e.g. on CPU-only machines.
#include <gtest/gtest.h>

#include <vector>

#include "comm_mpi_main.h"
#include "runtime/comm/nccl/nccl_communicator.h"

namespace muster::runtime::comm {
namespace {

using testing::world;

class NcclTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const int devices = nccl::NcclCommunicator::device_count();
    if (devices < world()->local_size()) {
      GTEST_SKIP() << "needs one CUDA device per rank on this host: " << devices << " device(s) for "
                   << world()->local_size() << " rank(s)";
    }
    nccl_ = nccl::NcclCommunicator::create(*world());
  }
  std::unique_ptr<nccl::NcclCommunicator> nccl_;
};

TEST_F(NcclTest, AllreduceSumAndAverageFloat32) {
  Communicator& comm = *world();
  const std::size_t n = (1 << 20) + 3;
  std::vector<float> host(n);
  for (std::size_t i = 0; i < n; ++i) host[i] = static_cast<float>(comm.rank() + 1) * static_cast<float>(i % 13);
  float* dev = nullptr;
  ASSERT_EQ(cudaMalloc(&dev, n * sizeof(float)), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(dev, host.data(), n * sizeof(float), cudaMemcpyHostToDevice), cudaSuccess);
  nccl_->allreduce(dev, n, DataType::kFloat32, ReduceOp::kSum);
  ASSERT_EQ(cudaMemcpy(host.data(), dev, n * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
  const float ranks_sum = static_cast<float>(comm.size() * (comm.size() + 1) / 2);
  std::size_t bad = 0;
  for (std::size_t i = 0; i < n; ++i) bad += host[i] != ranks_sum * static_cast<float>(i % 13);
  EXPECT_EQ(bad, 0u);
  nccl_->allreduce(dev, n, DataType::kFloat32, ReduceOp::kAverage);
  ASSERT_EQ(cudaMemcpy(host.data(), dev, n * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_FLOAT_EQ(host[5], ranks_sum * 5.0f);  // average of equal values
  cudaFree(dev);
}

TEST_F(NcclTest, BroadcastFromLastRank) {
  Communicator& comm = *world();
  const int root = comm.size() - 1;
  std::vector<int64_t> host(1000, comm.rank());
  int64_t* dev = nullptr;
  ASSERT_EQ(cudaMalloc(&dev, host.size() * sizeof(int64_t)), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(dev, host.data(), host.size() * sizeof(int64_t), cudaMemcpyHostToDevice), cudaSuccess);
  nccl_->broadcast(dev, host.size(), DataType::kInt64, root);
  ASSERT_EQ(cudaMemcpy(host.data(), dev, host.size() * sizeof(int64_t), cudaMemcpyDeviceToHost), cudaSuccess);
  for (int64_t v : host) ASSERT_EQ(v, root);
  cudaFree(dev);
}

}  // namespace
}  // namespace muster::runtime::comm

int main(int argc, char** argv) { return muster::runtime::comm::testing::run_mpi_tests(argc, argv); }
