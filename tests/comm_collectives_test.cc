// Broadcast, allgather, allgatherv and barrier under real mpirun (and
// without it, over a file store), checked
// against values every rank computes locally from (rank, index); small ops
// the ranks disagree on fail alike on every rank.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "comm_mpi_main.h"
#include "runtime/comm/communicator.h"
#include "runtime/comm/half.h"

namespace muster::runtime::comm {
namespace {

using testing::world;

int64_t value(int rank, std::size_t i) { return static_cast<int64_t>(rank) * 1000003 + static_cast<int64_t>(i) * 7 - 5; }

class BroadcastTest : public ::testing::TestWithParam<std::size_t> {};

TEST_P(BroadcastTest, EveryRootInt64AndFloat16) {
  Communicator& comm = *world();
  const std::size_t count = GetParam();
  for (int root = 0; root < comm.size(); ++root) {
    std::vector<int64_t> a(count);
    std::vector<uint16_t> h(count);
    for (std::size_t i = 0; i < count; ++i) {
      a[i] = value(comm.rank(), i);
      h[i] = float_to_half(static_cast<float>((comm.rank() + 1) * 3 + static_cast<int>(i % 50)));
    }
    comm.broadcast(a.data(), count, DataType::kInt64, root);
    Handle hh = comm.broadcast_async(h.data(), count, DataType::kFloat16, root);
    hh.wait();
    std::size_t bad = 0;
    for (std::size_t i = 0; i < count; ++i) {
      if (a[i] != value(root, i)) ++bad;
      if (half_to_float(h[i]) != static_cast<float>((root + 1) * 3 + static_cast<int>(i % 50))) ++bad;
    }
    EXPECT_EQ(bad, 0u) << "root " << root;
  }
}

INSTANTIATE_TEST_SUITE_P(Sizes, BroadcastTest,
                         ::testing::Values(std::size_t{0}, std::size_t{1}, std::size_t{7}, (std::size_t{1} << 17) + 3));

TEST(BroadcastTest, RejectsRootOutsideTheWorld) {
  Communicator& comm = *world();
  int x = 0;
  EXPECT_THROW(comm.broadcast(&x, 1, DataType::kInt32, comm.size()), InvalidArgument);
  EXPECT_THROW(comm.broadcast(&x, 1, DataType::kInt32, -1), InvalidArgument);
}

class AllgatherTest : public ::testing::TestWithParam<std::size_t> {};

TEST_P(AllgatherTest, BlocksInRankOrder) {
  Communicator& comm = *world();
  const std::size_t count = GetParam();
  std::vector<int64_t> send(count);
  for (std::size_t i = 0; i < count; ++i) send[i] = value(comm.rank(), i);
  std::vector<int64_t> recv(count * static_cast<std::size_t>(comm.size()) + 1, -1);
  comm.allgather(send.data(), count, DataType::kInt64, recv.data());
  std::size_t bad = 0;
  for (int r = 0; r < comm.size(); ++r) {
    for (std::size_t i = 0; i < count; ++i) {
      if (recv[static_cast<std::size_t>(r) * count + i] != value(r, i)) ++bad;
    }
  }
  EXPECT_EQ(bad, 0u);
  EXPECT_EQ(recv.back(), -1) << "allgather wrote past size()*count";
}

INSTANTIATE_TEST_SUITE_P(Sizes, AllgatherTest,
                         ::testing::Values(std::size_t{0}, std::size_t{1}, std::size_t{7}, std::size_t{100003}));

TEST(AllgatherTest, AsyncFloat32) {
  Communicator& comm = *world();
  std::vector<float> send = {static_cast<float>(comm.rank()) + 0.5f, -1.0f};
  std::vector<float> recv(2 * static_cast<std::size_t>(comm.size()));
  comm.allgather_async(send.data(), 2, DataType::kFloat32, recv.data()).wait();
  for (int r = 0; r < comm.size(); ++r) {
    EXPECT_EQ(recv[2 * static_cast<std::size_t>(r)], static_cast<float>(r) + 0.5f);
    EXPECT_EQ(recv[2 * static_cast<std::size_t>(r) + 1], -1.0f);
  }
}

// Rank r contributes r*k + (r == 1 ? 0 : 1) elements: varying, one rank empty.
TEST(AllgathervTest, VaryingCountsIncludingEmpty) {
  Communicator& comm = *world();
  for (std::size_t k : {std::size_t{1}, std::size_t{3}, std::size_t{40001}}) {
    auto count_of = [&](int r) { return static_cast<std::size_t>(r) * k + (r == 1 ? 0 : 1); };
    std::vector<int32_t> send(count_of(comm.rank()));
    for (std::size_t i = 0; i < send.size(); ++i) send[i] = static_cast<int32_t>(value(comm.rank(), i));
    std::vector<char> recv;
    std::vector<std::size_t> counts;
    comm.allgatherv(send.data(), send.size(), DataType::kInt32, &recv, &counts);
    ASSERT_EQ(counts.size(), static_cast<std::size_t>(comm.size()));
    std::size_t total = 0;
    for (int r = 0; r < comm.size(); ++r) {
      EXPECT_EQ(counts[static_cast<std::size_t>(r)], count_of(r));
      total += count_of(r);
    }
    ASSERT_EQ(recv.size(), total * sizeof(int32_t));
    const auto* got = reinterpret_cast<const int32_t*>(recv.data());
    std::size_t off = 0, bad = 0;
    for (int r = 0; r < comm.size(); ++r) {
      for (std::size_t i = 0; i < count_of(r); ++i) {
        if (got[off + i] != static_cast<int32_t>(value(r, i))) ++bad;
      }
      off += count_of(r);
    }
    EXPECT_EQ(bad, 0u) << "k=" << k;
  }
}

// Rank 0 arrives 300 ms late: nobody may leave the barrier before it arrives.
// Judged by when each rank left against when rank 0 arrived (steady_clock is
// CLOCK_MONOTONIC, one clock for every process on the host), since ranks of a
// loaded machine leave the first barrier at different times.
TEST(BarrierTest, NobodyLeavesBeforeTheLastArrives) {
  Communicator& comm = *world();
  comm.barrier();
  const auto ns = [] { return std::chrono::steady_clock::now().time_since_epoch().count(); };
  int64_t arrived = 0;
  if (comm.rank() == 0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    arrived = ns();
  }
  comm.barrier_async().wait();
  const int64_t left = ns();
  comm.broadcast(&arrived, 1, DataType::kInt64, 0);
  EXPECT_GE(left, arrived) << "left " << (arrived - left) / 1000 << " us before rank 0 arrived";
}

// Ops submitted from two threads run in one order on the progress thread;
// the threads agree on an order here by each submitting at a fixed turn.
TEST(OrderingTest, SyncCallsFromTwoThreads) {
  Communicator& comm = *world();
  std::vector<double> a(1000, comm.rank() + 1.0), b(1000, 2.0 * (comm.rank() + 1));
  std::thread t([&] { comm.allreduce(a.data(), a.size(), DataType::kFloat64, {ReduceOp::kSum, Algorithm::kRing}); });
  t.join();
  // MPI's own allreduce where the world is MPI's (the opt-in), else the ring.
  const Algorithm other = comm.bootstrap_kind() == "mpi" ? Algorithm::kMpi : Algorithm::kRing;
  comm.allreduce(b.data(), b.size(), DataType::kFloat64, {ReduceOp::kSum, other});
  const double n = comm.size();
  EXPECT_EQ(a[999], n * (n + 1) / 2);
  EXPECT_EQ(b[0], n * (n + 1));
}

// Ops the ranks disagree on, at small sizes (on one host: the small path's
// one round): every process throws a MismatchError worded alike but for its
// own rank number, naming the rank at fault, and the world goes on.
void expect_same_everywhere(Communicator& comm, const std::string& message) {
  const std::string common = message.substr(0, message.rfind(" (this is rank "));
  const int64_t mine = static_cast<int64_t>(std::hash<std::string>{}(common));
  std::vector<int64_t> all(static_cast<std::size_t>(comm.size()));
  comm.allgather(&mine, 1, DataType::kInt64, all.data());
  for (int r = 0; r < comm.size(); ++r) EXPECT_EQ(all[static_cast<std::size_t>(r)], mine) << "rank " << r << " words it differently";
}

TEST(MismatchTest, SmallOpsTheRanksDisagreeOnFailEveryRankAlike) {
  Communicator& comm = *world();
  const int last = comm.size() - 1;
  for (std::size_t base : {std::size_t{1}, std::size_t{300}}) {
    std::vector<float> buf(base + 1, 1.0f);
    std::string message;
    try {
      comm.allreduce(buf.data(), base + (comm.rank() == last ? 1 : 0), DataType::kFloat32);
      ADD_FAILURE() << "no error";
    } catch (const MismatchError& e) {
      message = e.what();
    }
    EXPECT_NE(message.find("rank " + std::to_string(last) + " has count " + std::to_string(base + 1)), std::string::npos)
        << message;
    expect_same_everywhere(comm, message);
  }
  std::string message;
  try {
    comm.barrier({comm.rank() == 0 ? "epoch-end" : "eval"});
    ADD_FAILURE() << "no error";
  } catch (const MismatchError& e) {
    message = e.what();
  }
  EXPECT_NE(message.find("'epoch-end'"), std::string::npos) << message;
  EXPECT_NE(message.find("'eval'"), std::string::npos) << message;
  expect_same_everywhere(comm, message);
  std::vector<double> x(5, comm.rank() + 1.0);
  comm.allreduce(x.data(), x.size(), DataType::kFloat64);
  EXPECT_EQ(x[4], comm.size() * (comm.size() + 1) / 2.0) << "the world works after the mismatches";
}

TEST(ContextTest, RanksAndLocalRanksAreConsistent) {
  Communicator& comm = *world();
  EXPECT_GE(comm.rank(), 0);
  EXPECT_LT(comm.rank(), comm.size());
  EXPECT_GE(comm.local_rank(), 0);
  EXPECT_LT(comm.local_rank(), comm.local_size());
  EXPECT_LE(comm.local_size(), comm.size());
  // Every rank gathers the others' ranks: a permutation of 0..size-1.
  int32_t me = comm.rank();
  std::vector<int32_t> all(static_cast<std::size_t>(comm.size()));
  comm.allgather(&me, 1, DataType::kInt32, all.data());
  for (int r = 0; r < comm.size(); ++r) EXPECT_EQ(all[static_cast<std::size_t>(r)], r);
}

}  // namespace
}  // namespace muster::runtime::comm

int main(int argc, char** argv) { return muster::runtime::comm::testing::run_mpi_tests(argc, argv); }
