// Reduction kernels: every dtype x op against a scalar reference, at lengths
// that exercise the vector body and the scalar tail.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <limits>
#include <random>
#include <tuple>
#include <type_traits>
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

// divide() multiplies by the reciprocal for a power-of-two divisor: the bits
// must be those of the division for every float and double, normal,
// subnormal, huge, signed zero, infinite, NaN; other divisors divide.
template <typename T, typename Bits>
void ExpectDivisionBits(DataType dtype) {
  std::mt19937_64 rng(7);
  std::vector<T> values;
  for (int i = 0; i < 4000; ++i) {
    Bits b = static_cast<Bits>(rng());
    T v;
    std::memcpy(&v, &b, sizeof v);
    values.push_back(v);  // every exponent, subnormals and NaNs included
  }
  const T specials[] = {T(0), -T(0), std::numeric_limits<T>::denorm_min(), -std::numeric_limits<T>::denorm_min(),
                        std::numeric_limits<T>::min(), std::numeric_limits<T>::max(), -std::numeric_limits<T>::max(),
                        std::numeric_limits<T>::infinity(), -std::numeric_limits<T>::infinity(),
                        std::numeric_limits<T>::quiet_NaN(), T(1), T(3), T(-1e-30)};
  values.insert(values.end(), std::begin(specials), std::end(specials));
  for (int divisor : {1, 2, 3, 4, 5, 6, 8, 16, 64, 1024, 4096, 1 << 20}) {
    std::vector<T> got = values;
    divide(got.data(), got.size(), dtype, divisor);
    for (std::size_t i = 0; i < values.size(); ++i) {
      const T want = values[i] / static_cast<T>(divisor);
      if (std::isnan(want)) {
        EXPECT_TRUE(std::isnan(got[i])) << "divisor " << divisor << " at " << i;
        continue;
      }
      Bits wb, gb;
      std::memcpy(&wb, &want, sizeof wb);
      std::memcpy(&gb, &got[i], sizeof gb);
      ASSERT_EQ(wb, gb) << "divisor " << divisor << ": " << values[i] << " / " << divisor << " gave " << got[i]
                        << ", want " << want;
    }
  }
}

TEST(DivideTest, FloatBitsEqualTheDivisionForEveryDivisor) { ExpectDivisionBits<float, uint32_t>(DataType::kFloat32); }

TEST(DivideTest, DoubleBitsEqualTheDivisionForEveryDivisor) { ExpectDivisionBits<double, uint64_t>(DataType::kFloat64); }

// reduce_last_into() must give the bits of reduce_into() then divide(), for
// every dtype, op and rank count: the fused float pass and the fallback alike.
template <typename T>
std::vector<T> random_values(std::mt19937_64& rng, std::size_t n, DataType dtype) {
  std::vector<T> v(n);
  for (auto& x : v) {
    if (dtype == DataType::kFloat16 || dtype == DataType::kBFloat16) {
      const float f = std::uniform_real_distribution<float>(-8.0f, 8.0f)(rng);
      x = static_cast<T>(dtype == DataType::kFloat16 ? float_to_half(f) : float_to_bfloat16(f));
    } else if (std::is_floating_point_v<T>) {
      x = static_cast<T>(std::uniform_real_distribution<double>(-1e6, 1e6)(rng));
    } else {
      x = static_cast<T>(std::uniform_int_distribution<int64_t>(-1000000, 1000000)(rng));
    }
  }
  return v;
}

template <typename T>
void ExpectFusedLastReductionBits(DataType dtype) {
  std::mt19937_64 rng(7);
  const std::size_t n = 1037;  // not a multiple of any vector width
  for (ReduceOp op : {ReduceOp::kAverage, ReduceOp::kSum, ReduceOp::kMax}) {
    for (int ranks : {1, 2, 3, 4, 6, 8}) {
      const auto dst = random_values<T>(rng, n, dtype), src = random_values<T>(rng, n, dtype);
      std::vector<T> want = dst, got = dst;
      reduce_into(want.data(), src.data(), n, dtype, op);
      if (op == ReduceOp::kAverage) divide(want.data(), n, dtype, ranks);
      reduce_last_into(got.data(), src.data(), n, dtype, op, ranks);
      ASSERT_EQ(std::memcmp(want.data(), got.data(), n * sizeof(T)), 0)
          << "dtype " << static_cast<int>(dtype) << ", op " << static_cast<int>(op) << ", " << ranks << " ranks";
    }
  }
}

TEST(ReduceLastInto, SameBitsAsReduceThenDivide) {
  ExpectFusedLastReductionBits<float>(DataType::kFloat32);
  ExpectFusedLastReductionBits<double>(DataType::kFloat64);
  ExpectFusedLastReductionBits<int32_t>(DataType::kInt32);
  ExpectFusedLastReductionBits<int64_t>(DataType::kInt64);
  ExpectFusedLastReductionBits<uint16_t>(DataType::kFloat16);
  ExpectFusedLastReductionBits<uint16_t>(DataType::kBFloat16);
}

}  // namespace
}  // namespace muster::runtime::comm
