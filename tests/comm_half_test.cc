// float16 / bfloat16 conversions: exhaustive round trips and rounding rules.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "runtime/comm/half.h"

namespace muster::runtime::comm {
namespace {

TEST(HalfTest, EveryFiniteHalfRoundTripsThroughFloat) {
  std::size_t bad = 0;
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const auto bits = static_cast<uint16_t>(h);
    const float f = half_to_float(bits);
    if ((bits & 0x7C00) == 0x7C00 && (bits & 0x3FF)) {
      if (!std::isnan(f)) ++bad;
      continue;
    }
    if (float_to_half(f) != bits) ++bad;
  }
  EXPECT_EQ(bad, 0u);
}

TEST(HalfTest, KnownValuesAndRounding) {
  EXPECT_EQ(float_to_half(1.0f), 0x3C00);
  EXPECT_EQ(float_to_half(-2.0f), 0xC000);
  EXPECT_EQ(float_to_half(65504.0f), 0x7BFF);
  EXPECT_EQ(float_to_half(65520.0f), 0x7C00);  // rounds up to infinity
  EXPECT_EQ(float_to_half(1e-8f), 0x0000);      // below half the smallest subnormal
  EXPECT_EQ(float_to_half(5.9604644775390625e-8f), 0x0001);
  EXPECT_EQ(half_to_float(0x0001), 5.9604644775390625e-8f);
  // 1 + 2^-11 is halfway between 1 and 1 + 2^-10: ties to even (1.0).
  EXPECT_EQ(float_to_half(1.0f + 0.00048828125f), 0x3C00);
  EXPECT_EQ(float_to_half(1.0f + 3 * 0.00048828125f), 0x3C02);
  EXPECT_EQ(float_to_half(std::numeric_limits<float>::infinity()), 0x7C00);
  EXPECT_TRUE(std::isnan(half_to_float(float_to_half(std::nanf("")))));
}

TEST(HalfTest, BulkMatchesScalar) {
  std::vector<float> src;
  for (int i = -3000; i < 3000; ++i) src.push_back(static_cast<float>(i) * 0.37f + 1e-6f * static_cast<float>(i));
  std::vector<uint16_t> h(src.size());
  std::vector<float> back(src.size());
  float_to_half(src.data(), h.data(), src.size());
  half_to_float(h.data(), back.data(), h.size());
  for (std::size_t i = 0; i < src.size(); ++i) {
    ASSERT_EQ(h[i], float_to_half(src[i])) << src[i];
    ASSERT_EQ(back[i], half_to_float(h[i]));
  }
}

TEST(BFloat16Test, RoundTripAndRounding) {
  std::size_t bad = 0;
  for (uint32_t b = 0; b < 0x10000; ++b) {
    const auto bits = static_cast<uint16_t>(b);
    const float f = bfloat16_to_float(bits);
    if (std::isnan(f)) continue;
    if (float_to_bfloat16(f) != bits) ++bad;
  }
  EXPECT_EQ(bad, 0u);
  EXPECT_EQ(float_to_bfloat16(1.0f), 0x3F80);
  EXPECT_EQ(float_to_bfloat16(1.0f + 1.0f / 256), 0x3F80);      // tie -> even
  EXPECT_EQ(float_to_bfloat16(1.0f + 3.0f / 256), 0x3F82);      // tie -> even (up)
  EXPECT_TRUE(std::isnan(bfloat16_to_float(float_to_bfloat16(std::nanf("")))));
}

}  // namespace
}  // namespace muster::runtime::comm
