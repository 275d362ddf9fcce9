// Every collective with ranks on threads, over KvBootstrap and an in-process
// store: transport (shared memory, TCP, two hosts mixing both) x world size
// (1-4) x sizes (0, 1, odd, past the inline size, straddling ring segments,
// several ring blocks) x dtypes x ops, each against a reference every rank
// computes locally from (rank, index).
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <numeric>
#include <string>
#include <tuple>
#include <vector>

#include <unistd.h>

#include "comm_reference.h"
#include "comm_thread_world.h"
#include "runtime/comm/half.h"
#include "runtime/comm/world_communicator.h"

namespace muster::runtime::comm {
namespace {

using namespace testing::reference;
using testing::run_world;

using World = std::tuple<std::string, int>;  // variant, ranks

class WorldTest : public ::testing::TestWithParam<World> {
 protected:
  std::string variant() const { return std::get<0>(GetParam()); }
  int ranks() const { return std::get<1>(GetParam()); }
};

constexpr DataType kDtypes[] = {DataType::kFloat32, DataType::kFloat64, DataType::kFloat16,
                                DataType::kBFloat16, DataType::kInt32,   DataType::kInt64};
constexpr ReduceOp kOps[] = {ReduceOp::kSum, ReduceOp::kAverage, ReduceOp::kMin, ReduceOp::kMax};

// Counts for `dtype`: 0, 1, odd, just past the inline size, straddling the
// 256 KB ring segments (3 segments + 3 elements), past a 1 MB ring block.
std::vector<std::size_t> counts_for(DataType dtype) {
  const std::size_t e = dtype_size(dtype);
  return {0, 1, 7, 4096 / e + 1, 3 * (256 * 1024) / e + 3, (1u << 20) / e + 5};
}

TEST_P(WorldTest, AllreduceEveryOpDtypeAndSize) {
  const std::string v = variant();
  run_world(ranks(), v, [&](int rank, Communicator& comm) {
    if (comm.size() > 1 && v != "hosts") {
      EXPECT_EQ(dynamic_cast<WorldCommunicator&>(comm).ring_transport_name(), v == "tcp" ? "tcp" : "shm");
    }
    EXPECT_EQ(comm.bootstrap_kind(), "store");
    for (DataType dtype : kDtypes) {
      for (ReduceOp op : kOps) {
        for (std::size_t count : counts_for(dtype)) {
          std::vector<char> buf = make_input(count, dtype, rank);
          buf.back() = 'Z';
          comm.allreduce(buf.data(), count, dtype, {op});
          EXPECT_EQ(check_result(buf, count, dtype, op, comm.size()), 0u)
              << dtype_name(dtype) << " " << reduce_op_name(op) << " x " << count << " rank " << rank;
          EXPECT_EQ(buf.back(), 'Z') << "wrote past the buffer";
        }
      }
    }
    // The ring asked for explicitly, also where the small path would run.
    for (std::size_t count : {std::size_t{1}, std::size_t{5}, std::size_t{1000}}) {
      std::vector<char> buf = make_input(count, DataType::kFloat32, rank);
      comm.allreduce(buf.data(), count, DataType::kFloat32, {ReduceOp::kSum, Algorithm::kRing});
      EXPECT_EQ(check_result(buf, count, DataType::kFloat32, ReduceOp::kSum, comm.size()), 0u);
    }
  });
}

int64_t value(int rank, std::size_t i) { return static_cast<int64_t>(rank) * 1000003 + static_cast<int64_t>(i) * 7 - 5; }

TEST_P(WorldTest, BroadcastFromEveryRoot) {
  run_world(ranks(), variant(), [&](int rank, Communicator& comm) {
    for (std::size_t count : {std::size_t{0}, std::size_t{1}, std::size_t{7}, std::size_t{513},
                              std::size_t{3 * 32768 + 3}, std::size_t{(1u << 18) + 1}}) {
      for (int root = 0; root < comm.size(); ++root) {
        std::vector<int64_t> a(count + 1, -1);
        std::vector<uint16_t> h(count);
        for (std::size_t i = 0; i < count; ++i) {
          a[i] = value(rank, i);
          h[i] = float_to_half(static_cast<float>((rank + 1) * 3 + static_cast<int>(i % 50)));
        }
        comm.broadcast(a.data(), count, DataType::kInt64, root, {"params", {static_cast<int64_t>(count)}});
        comm.broadcast_async(h.data(), count, DataType::kFloat16, root).wait();
        std::size_t bad = 0;
        for (std::size_t i = 0; i < count; ++i) {
          bad += a[i] != value(root, i);
          bad += half_to_float(h[i]) != static_cast<float>((root + 1) * 3 + static_cast<int>(i % 50));
        }
        EXPECT_EQ(bad, 0u) << "root " << root << " count " << count;
        EXPECT_EQ(a[count], -1) << "wrote past the buffer";
      }
    }
  });
}

TEST_P(WorldTest, AllgatherAndAllgatherv) {
  run_world(ranks(), variant(), [&](int rank, Communicator& comm) {
    const auto n = static_cast<std::size_t>(comm.size());
    for (std::size_t count : {std::size_t{0}, std::size_t{1}, std::size_t{7}, std::size_t{600},
                              std::size_t{100003}}) {
      std::vector<int64_t> send(count);
      for (std::size_t i = 0; i < count; ++i) send[i] = value(rank, i);
      std::vector<int64_t> recv(count * n + 1, -1);
      comm.allgather(send.data(), count, DataType::kInt64, recv.data());
      std::size_t bad = 0;
      for (std::size_t r = 0; r < n; ++r) {
        for (std::size_t i = 0; i < count; ++i) bad += recv[r * count + i] != value(static_cast<int>(r), i);
      }
      EXPECT_EQ(bad, 0u) << count;
      EXPECT_EQ(recv.back(), -1) << "allgather wrote past size()*count";
    }
    // Rank r contributes r*k + (r == 1 ? 0 : 1) elements: varying, one empty.
    for (std::size_t k : {std::size_t{1}, std::size_t{3}, std::size_t{40001}}) {
      auto count_of = [&](std::size_t r) { return r * k + (r == 1 ? 0 : 1); };
      std::vector<int32_t> send(count_of(static_cast<std::size_t>(rank)));
      for (std::size_t i = 0; i < send.size(); ++i) send[i] = static_cast<int32_t>(value(rank, i));
      std::vector<char> recv;
      std::vector<std::size_t> counts;
      comm.allgatherv_async(send.data(), send.size(), DataType::kInt32, &recv, &counts).wait();
      ASSERT_EQ(counts.size(), n);
      std::size_t total = 0, off = 0, bad = 0;
      for (std::size_t r = 0; r < n; ++r) {
        EXPECT_EQ(counts[r], count_of(r));
        total += count_of(r);
      }
      ASSERT_EQ(recv.size(), total * sizeof(int32_t));
      const auto* got = reinterpret_cast<const int32_t*>(recv.data());
      for (std::size_t r = 0; r < n; ++r) {
        for (std::size_t i = 0; i < count_of(r); ++i) bad += got[off + i] != static_cast<int32_t>(value(static_cast<int>(r), i));
        off += count_of(r);
      }
      EXPECT_EQ(bad, 0u) << "k=" << k;
    }
  });
}

// Reduce-scatter against the allreduce reference: rank r's block of the
// reduction, blocks of different sizes (one rank's empty).
TEST_P(WorldTest, ReducescatterEveryOpDtypeAndSize) {
  run_world(ranks(), variant(), [&](int rank, Communicator& comm) {
    const auto n = static_cast<std::size_t>(comm.size());
    for (DataType dtype : kDtypes) {
      for (ReduceOp op : kOps) {
        for (std::size_t k : {std::size_t{0}, std::size_t{1}, std::size_t{5}, std::size_t{70001}}) {
          std::vector<std::size_t> counts(n);
          for (std::size_t r = 0; r < n; ++r) counts[r] = r * k + (r == 1 ? 0 : k + 3);
          const std::size_t total = std::accumulate(counts.begin(), counts.end(), std::size_t{0});
          const std::vector<char> in = make_input(total, dtype, rank);
          const std::vector<char> before = in;
          const std::size_t mine = counts[static_cast<std::size_t>(rank)];
          std::vector<char> out(mine * dtype_size(dtype) + 1, 'Z');
          comm.reducescatter(in.data(), out.data(), counts, dtype, {op});
          std::size_t begin = 0;
          for (int r = 0; r < rank; ++r) begin += counts[static_cast<std::size_t>(r)];
          std::size_t bad = 0;
          for (std::size_t i = 0; i < mine; ++i) {
            const double ref = expected(begin + i, dtype, op, comm.size());
            const double got = load(out.data(), i, dtype);
            bad += !(std::abs(got - ref) <= tolerance(dtype, op, ref));
          }
          EXPECT_EQ(bad, 0u) << dtype_name(dtype) << " " << reduce_op_name(op) << " k=" << k;
          EXPECT_EQ(out.back(), 'Z') << "wrote past this rank's block";
          EXPECT_EQ(in, before) << "the input was modified";
        }
      }
    }
  });
}

// Alltoall against a reference: rank i sends rank j ((i + 2j) % 3) * k + 1
// elements, element e of that block being f(i, j, e).
int32_t f(int i, int j, std::size_t e) { return i * 100000 + j * 1000 + static_cast<int32_t>(e % 997); }

TEST_P(WorldTest, AlltoallPointToPoint) {
  run_world(ranks(), variant(), [&](int rank, Communicator& comm) {
    const int n = comm.size();
    for (std::size_t k : {std::size_t{0}, std::size_t{1}, std::size_t{3000}, std::size_t{90001}}) {
      auto block = [&](int i, int j) { return static_cast<std::size_t>((i + 2 * j) % 3) * k + 1; };
      std::vector<std::size_t> send_counts, recv_counts;
      std::vector<int32_t> send;
      for (int j = 0; j < n; ++j) {
        send_counts.push_back(block(rank, j));
        recv_counts.push_back(block(j, rank));
        for (std::size_t e = 0; e < block(rank, j); ++e) send.push_back(f(rank, j, e));
      }
      std::vector<char> recv;
      std::vector<std::size_t> got_counts;
      comm.alltoall(send.data(), send_counts, DataType::kInt32, &recv, &got_counts, {"a2a", {}});
      EXPECT_EQ(got_counts, recv_counts);
      // The same with the receive counts given, into the caller's memory.
      const std::size_t rtotal = std::accumulate(recv_counts.begin(), recv_counts.end(), std::size_t{0});
      std::vector<int32_t> into(rtotal + 1, -7);
      comm.alltoallv_async(send.data(), send_counts, into.data(), recv_counts, DataType::kInt32).wait();
      ASSERT_EQ(recv.size(), rtotal * sizeof(int32_t));
      const auto* got = reinterpret_cast<const int32_t*>(recv.data());
      std::size_t off = 0, bad = 0;
      for (int i = 0; i < n; ++i) {
        for (std::size_t e = 0; e < block(i, rank); ++e) {
          bad += got[off + e] != f(i, rank, e);
          bad += into[off + e] != f(i, rank, e);
        }
        off += block(i, rank);
      }
      EXPECT_EQ(bad, 0u) << "k=" << k;
      EXPECT_EQ(into.back(), -7) << "alltoallv wrote past the receive buffer";
    }
  });
}

TEST_P(WorldTest, AsyncOpsOfEveryKindCompleteInOrder) {
  run_world(ranks(), variant(), [&](int rank, Communicator& comm) {
    const auto n = static_cast<std::size_t>(comm.size());
    std::vector<char> a = make_input(300000, DataType::kFloat32, rank);
    std::vector<char> b = make_input(5, DataType::kFloat64, rank);
    std::vector<int64_t> bc(1000, rank == 0 ? 42 : 0), g(n, -1);
    int64_t me = rank;
    std::vector<Handle> handles;
    handles.push_back(comm.allreduce_async(a.data(), 300000, DataType::kFloat32, {ReduceOp::kMax}));
    handles.push_back(comm.broadcast_async(bc.data(), bc.size(), DataType::kInt64, 0));
    handles.push_back(comm.barrier_async({"mid"}));
    handles.push_back(comm.allgather_async(&me, 1, DataType::kInt64, g.data()));
    handles.push_back(comm.allreduce_async(b.data(), 5, DataType::kFloat64, {ReduceOp::kAverage}));
    for (std::size_t k = handles.size(); k-- > 0;) handles[k].wait();
    EXPECT_EQ(check_result(a, 300000, DataType::kFloat32, ReduceOp::kMax, comm.size()), 0u);
    EXPECT_EQ(check_result(b, 5, DataType::kFloat64, ReduceOp::kAverage, comm.size()), 0u);
    EXPECT_EQ(bc[999], 42);
    for (std::size_t r = 0; r < n; ++r) EXPECT_EQ(g[r], static_cast<int64_t>(r));
  });
}

// Ranks that outnumber the host's CPUs do not spin: a spinning rank would
// take the CPU from the peer it waits for. They sleep on their doorbells at
// once, and the ring still completes and is right.
TEST(WorldSpinTest, RanksThatOutnumberCpusSleepAtOnce) {
  const long online = sysconf(_SC_NPROCESSORS_ONLN);
  if (online > 31) GTEST_SKIP() << "would need " << online + 1 << " ranks on threads to outnumber this host's CPUs";
  const int n = static_cast<int>(online) + 1;
  const std::size_t count = (1u << 20) / 4 + 5;
  run_world(n, "shm", [&](int rank, Communicator& comm) {
    EXPECT_EQ(comm.options().spin.count(), 0) << "rank " << rank << " of " << n << " on " << online << " CPUs";
    std::vector<char> data = make_input(count, DataType::kFloat32, rank);
    comm.allreduce(data.data(), count, DataType::kFloat32, {ReduceOp::kSum, Algorithm::kRing});
    EXPECT_EQ(check_result(data, count, DataType::kFloat32, ReduceOp::kSum, n), 0u);
  });
}

std::string world_name(const ::testing::TestParamInfo<World>& info) {
  return std::get<0>(info.param) + "_np" + std::to_string(std::get<1>(info.param));
}

INSTANTIATE_TEST_SUITE_P(OneHost, WorldTest,
                         ::testing::Combine(::testing::Values(std::string("shm"), std::string("tcp")),
                                            ::testing::Values(1, 2, 3, 4)),
                         world_name);
INSTANTIATE_TEST_SUITE_P(TwoHosts, WorldTest,
                         ::testing::Combine(::testing::Values(std::string("hosts")), ::testing::Values(2, 3, 4)),
                         world_name);

}  // namespace
}  // namespace muster::runtime::comm
