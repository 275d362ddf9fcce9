// IEEE 754 binary16 ("half", float16) and bfloat16 <-> float conversions.
//
// Both 16-bit types travel as raw uint16_t bits. Conversions to 16 bits round
// to nearest even; NaN stays NaN (quiet), overflow becomes infinity, values
// below the smallest float16 subnormal flush to signed zero. Used by the
// reduction kernels (float16/bfloat16 reduce in float) and by the
// DistributedOptimizer's fp16 wire compression.
//
//   uint16_t h = float_to_half(0.1f);        // 0x2E66
//   float back = half_to_float(h);           // 0.0999755859375
//   float_to_half(src, dst, n);              // bulk forms
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace muster::runtime::comm {

inline uint32_t float_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

inline float bits_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

inline float half_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1Fu;
  uint32_t mant = h & 0x3FFu;
  if (exp == 0x1F) return bits_float(sign | 0x7F800000u | (mant << 13));  // inf / nan
  if (exp != 0) return bits_float(sign | ((exp + 112u) << 23) | (mant << 13));
  if (mant == 0) return bits_float(sign);
  // Subnormal: value = mant * 2^-24, exact in float.
  const float v = static_cast<float>(mant) * 5.9604644775390625e-8f;
  return sign ? -v : v;
}

inline uint16_t float_to_half(float f) {
  const uint32_t u = float_bits(f);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  const uint32_t abs = u & 0x7FFFFFFFu;
  if (abs >= 0x7F800000u) {  // inf or nan
    return static_cast<uint16_t>(sign | 0x7C00u | (abs > 0x7F800000u ? 0x200u : 0u));
  }
  if (abs >= 0x477FF000u) return static_cast<uint16_t>(sign | 0x7C00u);  // rounds to >= 65520: inf
  if (abs < 0x38800000u) {
    // Result is subnormal (or zero): count units of 2^-24, round half to even.
    const float v = bits_float(abs) * 16777216.0f;  // in units of 2^-24, exact, < 1024
    uint32_t i = static_cast<uint32_t>(v);
    const float frac = v - static_cast<float>(i);
    if (frac > 0.5f || (frac == 0.5f && (i & 1u))) ++i;
    return static_cast<uint16_t>(sign | i);  // i <= 0x400 becomes the smallest normal correctly
  }
  // Normal: rebias exponent, round mantissa from 23 to 10 bits (nearest even).
  uint32_t r = abs - 0x38000000u;  // exponent 127 -> 15
  r += 0x0FFFu + ((r >> 13) & 1u);
  return static_cast<uint16_t>(sign | (r >> 13));
}

inline float bfloat16_to_float(uint16_t b) { return bits_float(static_cast<uint32_t>(b) << 16); }

inline uint16_t float_to_bfloat16(float f) {
  const uint32_t u = float_bits(f);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);  // quiet nan
  const uint32_t rounded = u + 0x7FFFu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(rounded >> 16);
}

void half_to_float(const uint16_t* src, float* dst, std::size_t n);
void float_to_half(const float* src, uint16_t* dst, std::size_t n);
void bfloat16_to_float(const uint16_t* src, float* dst, std::size_t n);
void float_to_bfloat16(const float* src, uint16_t* dst, std::size_t n);

}  // namespace muster::runtime::comm
