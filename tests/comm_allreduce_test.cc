// Allreduce under real mpirun: every op x dtype x size x algorithm against a
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
#include "muster/runtime/comm/communicator.h"
#include "muster/runtime/comm/half.h"

namespace muster::runtime::comm {
namespace {

using testing::world;

// Small values with at most one binary fraction digit: every partial sum of
// up to 4 ranks is exact even in bfloat16, so sum/min/max must match exactly
// whatever order an algorithm adds in.
double input(int rank, std::size_t i, DataType t) {
  const double base = static_cast<double>((i * 7 + static_cast<std::size_t>(rank) * 13) % 17) - 8.0;
  if (t == DataType::kInt32 || t == DataType::kInt64) return base + rank;
  return base + 0.5 * (rank % 2);
}

void store(void* buf, std::size_t i, DataType t, double v) {
  switch (t) {
    case DataType::kFloat32: static_cast<float*>(buf)[i] = static_cast<float>(v); break;
    case DataType::kFloat64: static_cast<double*>(buf)[i] = v; break;
    case DataType::kFloat16: static_cast<uint16_t*>(buf)[i] = float_to_half(static_cast<float>(v)); break;
    case DataType::kBFloat16: static_cast<uint16_t*>(buf)[i] = float_to_bfloat16(static_cast<float>(v)); break;
    case DataType::kInt32: static_cast<int32_t*>(buf)[i] = static_cast<int32_t>(v); break;
    case DataType::kInt64: static_cast<int64_t*>(buf)[i] = static_cast<int64_t>(v); break;
  }
}

double load(const void* buf, std::size_t i, DataType t) {
  switch (t) {
    case DataType::kFloat32: return static_cast<const float*>(buf)[i];
    case DataType::kFloat64: return static_cast<const double*>(buf)[i];
    case DataType::kFloat16: return half_to_float(static_cast<const uint16_t*>(buf)[i]);
    case DataType::kBFloat16: return bfloat16_to_float(static_cast<const uint16_t*>(buf)[i]);
    case DataType::kInt32: return static_cast<const int32_t*>(buf)[i];
    case DataType::kInt64: return static_cast<double>(static_cast<const int64_t*>(buf)[i]);
  }
  return 0;
}

double expected(std::size_t i, DataType t, ReduceOp op, int size) {
  double acc = input(0, i, t);
  for (int r = 1; r < size; ++r) {
    const double v = input(r, i, t);
    switch (op) {
      case ReduceOp::kSum:
      case ReduceOp::kAverage: acc += v; break;
      case ReduceOp::kMin: acc = std::min(acc, v); break;
      case ReduceOp::kMax: acc = std::max(acc, v); break;
    }
  }
  if (op == ReduceOp::kAverage) {
    acc /= size;
    if (t == DataType::kInt32 || t == DataType::kInt64) acc = std::trunc(acc);
  }
  return acc;
}

double tolerance(DataType t, ReduceOp op, double ref) {
  if (op != ReduceOp::kAverage) return 0.0;
  switch (t) {
    case DataType::kFloat16: return std::abs(ref) * 1e-3 + 1e-3;
    case DataType::kBFloat16: return std::abs(ref) * 8e-3 + 8e-3;
    case DataType::kFloat32: return std::abs(ref) * 1e-6 + 1e-6;
    case DataType::kFloat64: return std::abs(ref) * 1e-12;
    default: return 0.0;
  }
}

std::vector<char> make_input(std::size_t count, DataType t, int rank) {
  std::vector<char> buf(count * dtype_size(t) + 1);
  for (std::size_t i = 0; i < count; ++i) store(buf.data(), i, t, input(rank, i, t));
  return buf;
}

// Returns the number of mismatching elements (and reports the first few).
std::size_t check_result(const std::vector<char>& buf, std::size_t count, DataType t, ReduceOp op, int size) {
  std::size_t bad = 0;
  for (std::size_t i = 0; i < count; ++i) {
    const double ref = expected(i, t, op, size);
    const double got = load(buf.data(), i, t);
    if (!(std::abs(got - ref) <= tolerance(t, op, ref))) {
      if (++bad <= 3) ADD_FAILURE() << "element " << i << ": got " << got << ", expected " << ref;
    }
  }
  return bad;
}

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
                       ::testing::Values(Algorithm::kMpi, Algorithm::kRing)),
    case_name);

// 64 MB float32: the size the benchmark targets, both algorithms.
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
                                            ::testing::Values(Algorithm::kMpi, Algorithm::kRing)));

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

TEST(AllreduceAsync, AutoPicksBothAlgorithmsAroundThreshold) {
  Communicator& comm = *world();
  const std::size_t threshold = comm.options().ring_threshold_bytes;
  for (std::size_t count : {threshold / 8 - 1, threshold / 8, threshold / 8 + 1}) {
    std::vector<char> buf = make_input(count, DataType::kFloat64, comm.rank());
    comm.allreduce_async(buf.data(), count, DataType::kFloat64, {ReduceOp::kSum, Algorithm::kAuto}).wait();
    EXPECT_EQ(check_result(buf, count, DataType::kFloat64, ReduceOp::kSum, comm.size()), 0u) << count;
  }
}

}  // namespace
}  // namespace muster::runtime::comm

int main(int argc, char** argv) { return muster::runtime::comm::testing::run_mpi_tests(argc, argv); }
