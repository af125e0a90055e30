// Tests for engine/base/half: exhaustive f16 round trip, rounding to nearest
// even, bf16 rounding and NaN handling.
#include "engine/base/half.h"

#include <gtest/gtest.h>

#include <cmath>

namespace {

TEST(HalfTest, EveryFiniteF16RoundTripsExactly) {
  for (uint32_t h = 0; h < 0x10000; h++) {
    float f = spill_f16_to_f32(static_cast<uint16_t>(h));
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(spill_f16_to_f32(spill_f32_to_f16(f)))) << h;
      continue;
    }
    ASSERT_EQ(spill_f32_to_f16(f), h) << "h=" << h << " f=" << f;
  }
}

TEST(HalfTest, KnownValuesAndRounding) {
  EXPECT_EQ(spill_f32_to_f16(1.0f), 0x3C00);
  EXPECT_EQ(spill_f32_to_f16(-2.0f), 0xC000);
  EXPECT_EQ(spill_f32_to_f16(65504.0f), 0x7BFF);
  EXPECT_EQ(spill_f32_to_f16(1e6f), 0x7C00);  // overflow to +inf
  EXPECT_EQ(spill_f32_to_f16(1e-9f), 0x0000);  // underflow to +0
  // 1 + 2^-11 is halfway between 1 and 1+2^-10: ties to even (1.0).
  EXPECT_EQ(spill_f32_to_f16(1.0f + std::ldexp(1.0f, -11)), 0x3C00);
  // 1 + 3*2^-11 is halfway between 1+2^-10 and 1+2^-9: ties to even (up).
  EXPECT_EQ(spill_f32_to_f16(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3C02);
  EXPECT_FLOAT_EQ(spill_f16_to_f32(0x0001), std::ldexp(1.0f, -24));  // smallest subnormal
}

TEST(HalfTest, Bf16RoundsToNearestEvenAndKeepsNaN) {
  EXPECT_EQ(spill_f32_to_bf16(1.0f), 0x3F80);
  EXPECT_FLOAT_EQ(spill_bf16_to_f32(0x3F80), 1.0f);
  float f = 1.0f + std::ldexp(1.0f, -8);  // halfway: ties to even -> 1.0
  EXPECT_EQ(spill_f32_to_bf16(f), 0x3F80);
  EXPECT_TRUE(std::isnan(spill_bf16_to_f32(spill_f32_to_bf16(NAN))));
}

}  // namespace
