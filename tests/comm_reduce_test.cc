// Reduction kernels: every dtype x op against a scalar reference, at lengths
// that exercise the vector body and the scalar tail.
#include <gtest/gtest.h>

#include <cstdint>
#include <tuple>
#include <vector>

#include "runtime/comm/half.h"
#include "runtime/comm/reduce.h"

namespace muster::runtime::comm {
namespace {

double pick(std::size_t i, int which) { return static_cast<double>(static_cast<int>((i * 31 + which * 17) % 41) - 20); }

template <typename T>
void check_plain(DataType t, ReduceOp op, std::size_t n) {
  std::vector<T> a(n), b(n);
  for (std::size_t i = 0; i < n; ++i) {
    a[i] = static_cast<T>(pick(i, 0));
    b[i] = static_cast<T>(pick(i, 1));
  }
  std::vector<T> ref = a;
  for (std::size_t i = 0; i < n; ++i) {
    if (op == ReduceOp::kMin) ref[i] = std::min(a[i], b[i]);
    else if (op == ReduceOp::kMax) ref[i] = std::max(a[i], b[i]);
    else ref[i] = a[i] + b[i];
  }
  reduce_into(a.data(), b.data(), n, t, op);
  EXPECT_EQ(a, ref) << dtype_name(t) << " " << reduce_op_name(op) << " n=" << n;
}

void check_16bit(DataType t, ReduceOp op, std::size_t n) {
  const bool half = t == DataType::kFloat16;
  auto enc = [&](double v) { return half ? float_to_half(static_cast<float>(v)) : float_to_bfloat16(static_cast<float>(v)); };
  auto dec = [&](uint16_t v) { return half ? half_to_float(v) : bfloat16_to_float(v); };
  std::vector<uint16_t> a(n), b(n);
  for (std::size_t i = 0; i < n; ++i) {
    a[i] = enc(pick(i, 0));
    b[i] = enc(pick(i, 1));
  }
  std::vector<uint16_t> out = a;
  reduce_into(out.data(), b.data(), n, t, op);
  for (std::size_t i = 0; i < n; ++i) {
    const float x = dec(a[i]), y = dec(b[i]);
    const float want = op == ReduceOp::kMin ? std::min(x, y) : op == ReduceOp::kMax ? std::max(x, y) : x + y;
    ASSERT_EQ(dec(out[i]), want) << dtype_name(t) << " " << reduce_op_name(op) << " i=" << i;
  }
}

class ReduceKernelTest : public ::testing::TestWithParam<std::tuple<DataType, ReduceOp>> {};

TEST_P(ReduceKernelTest, MatchesScalarReference) {
  const auto [t, op] = GetParam();
  for (std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{7}, std::size_t{33}, std::size_t{4099}}) {
    switch (t) {
      case DataType::kFloat32: check_plain<float>(t, op, n); break;
      case DataType::kFloat64: check_plain<double>(t, op, n); break;
      case DataType::kInt32: check_plain<int32_t>(t, op, n); break;
      case DataType::kInt64: check_plain<int64_t>(t, op, n); break;
      default: check_16bit(t, op, n); break;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(All, ReduceKernelTest,
                         ::testing::Combine(::testing::Values(DataType::kFloat32, DataType::kFloat64, DataType::kFloat16,
                                                              DataType::kBFloat16, DataType::kInt32, DataType::kInt64),
                                            ::testing::Values(ReduceOp::kSum, ReduceOp::kMin, ReduceOp::kMax)));

TEST(DivideTest, FloatsAndIntegersTowardZero) {
  std::vector<float> f = {3.0f, -3.0f, 1.5f};
  divide(f.data(), f.size(), DataType::kFloat32, 2);
  EXPECT_EQ(f, (std::vector<float>{1.5f, -1.5f, 0.75f}));
  std::vector<int64_t> i = {7, -7, 6};
  divide(i.data(), i.size(), DataType::kInt64, 3);
  EXPECT_EQ(i, (std::vector<int64_t>{2, -2, 2}));
  std::vector<uint16_t> h = {float_to_half(3.0f)};
  divide(h.data(), 1, DataType::kFloat16, 4);
  EXPECT_EQ(half_to_float(h[0]), 0.75f);
}

}  // namespace
}  // namespace muster::runtime::comm
