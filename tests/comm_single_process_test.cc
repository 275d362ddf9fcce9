// Without mpirun a Communicator is a world of one: every collective works
// (no-ops and copies), nothing needs MPI, and errors in arguments are typed.
#include <gtest/gtest.h>

#include <cstdlib>
#include <vector>

#include "runtime/comm/communicator.h"

namespace muster::runtime::comm {
namespace {

class SingleProcessTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (std::getenv("OMPI_COMM_WORLD_SIZE")) GTEST_SKIP() << "run under mpirun; this test is for plain runs";
    comm_ = Communicator::create();
  }
  std::unique_ptr<Communicator> comm_;
};

TEST_F(SingleProcessTest, ContextIsRankZeroOfOne) {
  EXPECT_EQ(comm_->rank(), 0);
  EXPECT_EQ(comm_->size(), 1);
  EXPECT_EQ(comm_->local_rank(), 0);
  EXPECT_EQ(comm_->local_size(), 1);
}

TEST_F(SingleProcessTest, CollectivesAreCopiesAndNoOps) {
  std::vector<float> a = {1.5f, -2.0f, 3.0f};
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAverage, ReduceOp::kMin, ReduceOp::kMax}) {
    for (Algorithm alg : {Algorithm::kAuto, Algorithm::kMpi, Algorithm::kRing}) {
      comm_->allreduce(a.data(), a.size(), DataType::kFloat32, {op, alg});
      EXPECT_EQ(a, (std::vector<float>{1.5f, -2.0f, 3.0f}));
    }
  }
  comm_->broadcast(a.data(), a.size(), DataType::kFloat32, 0);
  std::vector<float> g(3);
  comm_->allgather(a.data(), 3, DataType::kFloat32, g.data());
  EXPECT_EQ(g, a);
  std::vector<char> v;
  std::vector<std::size_t> counts;
  comm_->allgatherv(a.data(), 2, DataType::kFloat32, &v, &counts);
  EXPECT_EQ(counts, std::vector<std::size_t>{2});
  ASSERT_EQ(v.size(), 8u);
  EXPECT_EQ(reinterpret_cast<const float*>(v.data())[1], -2.0f);
  comm_->barrier();
  Handle h = comm_->allreduce_async(a.data(), a.size(), DataType::kFloat32);
  h.wait();
  EXPECT_TRUE(h.done());
}

TEST_F(SingleProcessTest, SharedBuffersArePrivateMemory) {
  auto buf = comm_->allocate_shared(100);
  EXPECT_FALSE(buf->direct()) << "a world of one has no peers to map it";
  EXPECT_EQ(buf->bytes(), 100u);
  float* f = static_cast<float*>(buf->data());
  for (int i = 0; i < 25; ++i) ASSERT_EQ(f[i], 0.0f);
  f[0] = 2.5f;
  comm_->allreduce(f, 25, DataType::kFloat32, {ReduceOp::kAverage});
  EXPECT_EQ(f[0], 2.5f);
}

TEST_F(SingleProcessTest, BadArgumentsAreTyped) {
  EXPECT_THROW(comm_->broadcast(nullptr, 0, DataType::kInt32, 1), InvalidArgument);
  EXPECT_THROW(comm_->allreduce(nullptr, 4, DataType::kInt32), InvalidArgument);
  Handle empty;
  EXPECT_THROW(empty.wait(), InvalidArgument);
}

TEST(CommOptionsTest, EnvironmentOverridesTimeout) {
  if (std::getenv("OMPI_COMM_WORLD_SIZE")) GTEST_SKIP() << "plain runs only";
  setenv("MUSTER_COMM_TIMEOUT_MS", "1234", 1);
  auto comm = Communicator::create();
  unsetenv("MUSTER_COMM_TIMEOUT_MS");
  EXPECT_EQ(comm->options().timeout.count(), 1234);
  setenv("MUSTER_COMM_RING_TRANSPORT", "carrier-pigeon", 1);
  EXPECT_THROW(Communicator::create(), InvalidArgument);
  unsetenv("MUSTER_COMM_RING_TRANSPORT");
}

// The waiting spin: automatic (a rank with a CPU of its own spins 5 ms),
// or what the environment or the options say; negative values are refused.
TEST(CommOptionsTest, SpinIsResolvedOrOverridden) {
  if (std::getenv("OMPI_COMM_WORLD_SIZE")) GTEST_SKIP() << "plain runs only";
  EXPECT_EQ(Communicator::create()->options().spin.count(), 5000) << "one rank on this host has a CPU of its own";
  setenv("MUSTER_COMM_SPIN_US", "123", 1);
  EXPECT_EQ(Communicator::create()->options().spin.count(), 123);
  unsetenv("MUSTER_COMM_SPIN_US");
  CommOptions o;
  o.spin = std::chrono::microseconds(0);
  EXPECT_EQ(Communicator::create(o)->options().spin.count(), 0);
  o.spin = std::chrono::microseconds(-5);
  EXPECT_THROW(Communicator::create(o), InvalidArgument);
}

}  // namespace
}  // namespace muster::runtime::comm
