// Allreduce under real mpirun (and without it, over a file store: the
// *_mpi cases are then filtered out): every op x dtype x size x algorithm against a
// reference computed locally in double from the same deterministic inputs
// (input = f(rank, index)), plus 64 MB float32 cases and the async forms.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <tuple>
#include <vector>

#include "comm_mpi_main.h"
#include "comm_reference.h"
#include "runtime/comm/communicator.h"
#include "runtime/comm/half.h"

namespace muster::runtime::comm {
namespace {

using testing::world;

using namespace testing::reference;

using Case = std::tuple<ReduceOp, DataType, std::size_t, Algorithm>;

class AllreduceTest : public ::testing::TestWithParam<Case> {};

TEST_P(AllreduceTest, MatchesReference) {
  const auto [op, dtype, bytes_hint, algorithm] = GetParam();
  // Sizes 0, 1, 7 elements and "1 MB + 3 elements" (bytes_hint = 1 MB).
  const std::size_t count = bytes_hint < 1024 ? bytes_hint : bytes_hint / dtype_size(dtype) + 3;
  Communicator& comm = *world();
  std::vector<char> buf = make_input(count, dtype, comm.rank());
  buf.back() = 'Z';  // guard byte past the data
  comm.allreduce(buf.data(), count, dtype, {op, algorithm});
  EXPECT_EQ(check_result(buf, count, dtype, op, comm.size()), 0u);
  EXPECT_EQ(buf.back(), 'Z') << "allreduce wrote past the end of the buffer";
}

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  const auto [op, dtype, bytes_hint, algorithm] = info.param;
  return std::string(reduce_op_name(op)) + "_" + dtype_name(dtype) + "_" +
         (bytes_hint < 1024 ? std::to_string(bytes_hint) : std::string("1MBplus3")) + "_" + algorithm_name(algorithm);
}

INSTANTIATE_TEST_SUITE_P(
    AllOpsDtypesSizes, AllreduceTest,
    ::testing::Combine(::testing::Values(ReduceOp::kSum, ReduceOp::kAverage, ReduceOp::kMin, ReduceOp::kMax),
                       ::testing::Values(DataType::kFloat32, DataType::kFloat64, DataType::kFloat16,
                                         DataType::kBFloat16, DataType::kInt32, DataType::kInt64),
                       ::testing::Values(std::size_t{0}, std::size_t{1}, std::size_t{7}, std::size_t{1} << 20),
                       ::testing::Values(Algorithm::kMpi, Algorithm::kRing, Algorithm::kAuto)),
    case_name);

// 64 MB float32: the size the benchmark targets, every algorithm (kAuto: the
// ring, or with more ranks than CPUs the small path's pieces).
class LargeAllreduceTest : public ::testing::TestWithParam<std::tuple<ReduceOp, Algorithm>> {};

TEST_P(LargeAllreduceTest, SixtyFourMegabytesFloat32) {
  const auto [op, algorithm] = GetParam();
  const std::size_t count = (64u << 20) / 4;
  Communicator& comm = *world();
  std::vector<char> buf = make_input(count, DataType::kFloat32, comm.rank());
  comm.allreduce(buf.data(), count, DataType::kFloat32, {op, algorithm});
  EXPECT_EQ(check_result(buf, count, DataType::kFloat32, op, comm.size()), 0u);
}

INSTANTIATE_TEST_SUITE_P(Float32, LargeAllreduceTest,
                         ::testing::Combine(::testing::Values(ReduceOp::kSum, ReduceOp::kAverage),
                                            ::testing::Values(Algorithm::kMpi, Algorithm::kRing, Algorithm::kAuto)),
                         [](const ::testing::TestParamInfo<std::tuple<ReduceOp, Algorithm>>& info) {
                           return std::string(reduce_op_name(std::get<0>(info.param))) + "_" +
                                  algorithm_name(std::get<1>(info.param));
                         });

// Just past the small path's limit (4 MB where ranks outnumber CPUs): after
// the descriptor exchange, the pieces or the ring, every dtype, a ragged
// last piece, and nothing written past the end.
TEST(AllreducePastTheSmallLimit, EveryDtypeSumAndMax) {
  Communicator& comm = *world();
  for (DataType dtype : {DataType::kFloat32, DataType::kFloat64, DataType::kFloat16, DataType::kBFloat16,
                         DataType::kInt32, DataType::kInt64}) {
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax}) {
      const std::size_t count = (std::size_t{4} << 20) / dtype_size(dtype) + 37;
      std::vector<char> buf = make_input(count, dtype, comm.rank());
      buf.back() = 'Z';
      comm.allreduce(buf.data(), count, dtype, {op});
      EXPECT_EQ(check_result(buf, count, dtype, op, comm.size()), 0u) << dtype_name(dtype) << " " << reduce_op_name(op);
      EXPECT_EQ(buf.back(), 'Z') << "allreduce wrote past the end of the buffer";
    }
  }
}

TEST(AllreduceAsync, SeveralInFlightCompleteInOrder) {
  Communicator& comm = *world();
  const std::vector<std::size_t> counts = {5, 300000, 1, 70000};
  std::vector<std::vector<char>> bufs;
  std::vector<Handle> handles;
  for (std::size_t k = 0; k < counts.size(); ++k) {
    bufs.push_back(make_input(counts[k], DataType::kFloat32, comm.rank()));
  }
  for (std::size_t k = 0; k < counts.size(); ++k) {
    handles.push_back(comm.allreduce_async(bufs[k].data(), counts[k], DataType::kFloat32, {ReduceOp::kMax}));
  }
  for (std::size_t k = counts.size(); k-- > 0;) handles[k].wait();  // any wait order
  for (std::size_t k = 0; k < counts.size(); ++k) {
    EXPECT_TRUE(handles[k].done());
    EXPECT_EQ(check_result(bufs[k], counts[k], DataType::kFloat32, ReduceOp::kMax, comm.size()), 0u) << k;
  }
}

// Around the inline size: the small path (data in the descriptor exchange)
// below it, the ring above it.
TEST(AllreduceAsync, AutoAroundTheInlineSize) {
  Communicator& comm = *world();
  const std::size_t limit = comm.options().inline_bytes;
  for (std::size_t count : {limit / 8 - 1, limit / 8, limit / 8 + 1}) {
    std::vector<char> buf = make_input(count, DataType::kFloat64, comm.rank());
    comm.allreduce_async(buf.data(), count, DataType::kFloat64, {ReduceOp::kSum, Algorithm::kAuto}).wait();
    EXPECT_EQ(check_result(buf, count, DataType::kFloat64, ReduceOp::kSum, comm.size()), 0u) << count;
  }
}

}  // namespace
}  // namespace muster::runtime::comm

int main(int argc, char** argv) { return muster::runtime::comm::testing::run_mpi_tests(argc, argv); }
