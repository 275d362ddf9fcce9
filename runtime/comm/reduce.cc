#include "runtime/comm/reduce.h"

#include <immintrin.h>

#include <cstdint>

#include "runtime/comm/half.h"
#include "runtime/error.h"

namespace muster::runtime::comm {
namespace {

template <typename T>
inline void sum_loop(T* __restrict d, const T* __restrict s, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) d[i] = d[i] + s[i];
}
template <typename T>
inline void min_loop(T* __restrict d, const T* __restrict s, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) d[i] = s[i] < d[i] ? s[i] : d[i];
}
template <typename T>
inline void max_loop(T* __restrict d, const T* __restrict s, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) d[i] = s[i] > d[i] ? s[i] : d[i];
}

// One entry point per (type, op), each compiled for AVX2 and for the
// baseline; the loader picks the clone the CPU supports.
#define MUSTER_KERNEL(name, loop, T)                                            \
  __attribute__((target_clones("avx2", "default"))) void name(T* d, const T* s, \
                                                              std::size_t n) {   \
    loop<T>(d, s, n);                                                           \
  }
MUSTER_KERNEL(sum_f32, sum_loop, float)
MUSTER_KERNEL(min_f32, min_loop, float)
MUSTER_KERNEL(max_f32, max_loop, float)
MUSTER_KERNEL(sum_f64, sum_loop, double)
MUSTER_KERNEL(min_f64, min_loop, double)
MUSTER_KERNEL(max_f64, max_loop, double)
MUSTER_KERNEL(sum_i32, sum_loop, int32_t)
MUSTER_KERNEL(min_i32, min_loop, int32_t)
MUSTER_KERNEL(max_i32, max_loop, int32_t)
MUSTER_KERNEL(sum_i64, sum_loop, int64_t)
MUSTER_KERNEL(min_i64, min_loop, int64_t)
MUSTER_KERNEL(max_i64, max_loop, int64_t)
#undef MUSTER_KERNEL

template <typename T>
void reduce_typed(T* d, const T* s, std::size_t n, ReduceOp op);
#define MUSTER_DISPATCH(T, suffix)                                  \
  template <>                                                       \
  void reduce_typed<T>(T * d, const T* s, std::size_t n, ReduceOp op) { \
    switch (op) {                                                   \
      case ReduceOp::kSum:                                          \
      case ReduceOp::kAverage: sum_##suffix(d, s, n); return;       \
      case ReduceOp::kMin: min_##suffix(d, s, n); return;           \
      case ReduceOp::kMax: max_##suffix(d, s, n); return;           \
    }                                                               \
  }
MUSTER_DISPATCH(float, f32)
MUSTER_DISPATCH(double, f64)
MUSTER_DISPATCH(int32_t, i32)
MUSTER_DISPATCH(int64_t, i64)
#undef MUSTER_DISPATCH

bool cpu_has_f16c() {
  static const bool has = __builtin_cpu_supports("f16c") && __builtin_cpu_supports("avx2");
  return has;
}

__attribute__((target("avx2,f16c"))) void half_to_float_f16c(const uint16_t* src, float* dst, std::size_t n) {
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(h));
  }
  for (; i < n; ++i) dst[i] = half_to_float(src[i]);
}

__attribute__((target("avx2,f16c"))) void float_to_half_f16c(const float* src, uint16_t* dst, std::size_t n) {
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 f = _mm256_loadu_ps(src + i);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i), _mm256_cvtps_ph(f, _MM_FROUND_TO_NEAREST_INT));
  }
  for (; i < n; ++i) dst[i] = float_to_half(src[i]);
}

// float16 / bfloat16: widen blocks to float, reduce, round back.
constexpr std::size_t kBlock = 1024;

template <typename Widen, typename Narrow>
void reduce_16bit(uint16_t* d, const uint16_t* s, std::size_t n, ReduceOp op, Widen widen, Narrow narrow) {
  alignas(64) float a[kBlock];
  alignas(64) float b[kBlock];
  for (std::size_t off = 0; off < n; off += kBlock) {
    const std::size_t m = n - off < kBlock ? n - off : kBlock;
    widen(d + off, a, m);
    widen(s + off, b, m);
    reduce_typed<float>(a, b, m, op);
    narrow(a, d + off, m);
  }
}

// Floating-point division by a power of two is multiplication by its exact
// reciprocal: both round the same real number x * 2^-k once, so the bits are
// the same (subnormal results included). A multiply runs in a cycle; a
// division keeps the divider busy for several, which made averaging the
// slowest pass of a large average over shared memory (2 ranks, 102 MB:
// 1.5 ms of an 8.2 ms two-phase allreduce; runtime/comm/README.md). Other
// divisors (3, 6 ranks) keep the division, exact as MPI's and the tests'.
#define MUSTER_SCALE_KERNELS(suffix, T)                                                          \
  __attribute__((target_clones("avx2", "default"))) void scale_##suffix(T* d, std::size_t n, T f) { \
    for (std::size_t i = 0; i < n; ++i) d[i] = d[i] * f;                                        \
  }                                                                                              \
  __attribute__((target_clones("avx2", "default"))) void div_##suffix(T* d, std::size_t n, T q) {   \
    for (std::size_t i = 0; i < n; ++i) d[i] = d[i] / q;                                        \
  }
MUSTER_SCALE_KERNELS(f32, float)
MUSTER_SCALE_KERNELS(f64, double)
#undef MUSTER_SCALE_KERNELS

// An average's last reduction and its division in one pass: the sum is
// rounded to T, then scaled (or divided) and rounded again, as the two
// passes do, without writing and reading back every element in between.
#define MUSTER_SUM_SCALE_KERNELS(suffix, T)                                                             \
  __attribute__((target_clones("avx2", "default"))) void sum_scale_##suffix(T* __restrict d,            \
                                                                            const T* __restrict s,       \
                                                                            std::size_t n, T f) {        \
    for (std::size_t i = 0; i < n; ++i) d[i] = (d[i] + s[i]) * f;                                       \
  }                                                                                                      \
  __attribute__((target_clones("avx2", "default"))) void sum_div_##suffix(T* __restrict d,              \
                                                                          const T* __restrict s,         \
                                                                          std::size_t n, T q) {          \
    for (std::size_t i = 0; i < n; ++i) d[i] = (d[i] + s[i]) / q;                                       \
  }
MUSTER_SUM_SCALE_KERNELS(f32, float)
MUSTER_SUM_SCALE_KERNELS(f64, double)
#undef MUSTER_SUM_SCALE_KERNELS

bool power_of_two(int v) { return v > 0 && (v & (v - 1)) == 0; }

void divide_f32(float* d, std::size_t n, int divisor) {
  if (power_of_two(divisor)) return scale_f32(d, n, 1.0f / static_cast<float>(divisor));
  div_f32(d, n, static_cast<float>(divisor));
}

void divide_f64(double* d, std::size_t n, int divisor) {
  if (power_of_two(divisor)) return scale_f64(d, n, 1.0 / static_cast<double>(divisor));
  div_f64(d, n, static_cast<double>(divisor));
}

template <typename T>
void divide_typed(T* d, std::size_t n, int divisor) {
  const T q = static_cast<T>(divisor);
  for (std::size_t i = 0; i < n; ++i) d[i] = d[i] / q;
}

template <typename Widen, typename Narrow>
void divide_16bit(uint16_t* d, std::size_t n, int divisor, Widen widen, Narrow narrow) {
  alignas(64) float a[kBlock];
  const float inv = 1.0f / static_cast<float>(divisor);
  for (std::size_t off = 0; off < n; off += kBlock) {
    const std::size_t m = n - off < kBlock ? n - off : kBlock;
    widen(d + off, a, m);
    for (std::size_t i = 0; i < m; ++i) a[i] *= inv;
    narrow(a, d + off, m);
  }
}

void widen_half(const uint16_t* s, float* d, std::size_t n) { half_to_float(s, d, n); }
void narrow_half(const float* s, uint16_t* d, std::size_t n) { float_to_half(s, d, n); }
void widen_bf16(const uint16_t* s, float* d, std::size_t n) { bfloat16_to_float(s, d, n); }
void narrow_bf16(const float* s, uint16_t* d, std::size_t n) { float_to_bfloat16(s, d, n); }

}  // namespace

void half_to_float(const uint16_t* src, float* dst, std::size_t n) {
  if (cpu_has_f16c()) return half_to_float_f16c(src, dst, n);
  for (std::size_t i = 0; i < n; ++i) dst[i] = half_to_float(src[i]);
}

void float_to_half(const float* src, uint16_t* dst, std::size_t n) {
  if (cpu_has_f16c()) return float_to_half_f16c(src, dst, n);
  for (std::size_t i = 0; i < n; ++i) dst[i] = float_to_half(src[i]);
}

void bfloat16_to_float(const uint16_t* src, float* dst, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) dst[i] = bits_float(static_cast<uint32_t>(src[i]) << 16);
}

void float_to_bfloat16(const float* src, uint16_t* dst, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) dst[i] = float_to_bfloat16(src[i]);
}

void reduce_into(void* dst, const void* src, std::size_t count, DataType dtype, ReduceOp op) {
  switch (dtype) {
    case DataType::kFloat32:
      return reduce_typed(static_cast<float*>(dst), static_cast<const float*>(src), count, op);
    case DataType::kFloat64:
      return reduce_typed(static_cast<double*>(dst), static_cast<const double*>(src), count, op);
    case DataType::kInt32:
      return reduce_typed(static_cast<int32_t*>(dst), static_cast<const int32_t*>(src), count, op);
    case DataType::kInt64:
      return reduce_typed(static_cast<int64_t*>(dst), static_cast<const int64_t*>(src), count, op);
    case DataType::kFloat16:
      return reduce_16bit(static_cast<uint16_t*>(dst), static_cast<const uint16_t*>(src), count, op,
                          widen_half, narrow_half);
    case DataType::kBFloat16:
      return reduce_16bit(static_cast<uint16_t*>(dst), static_cast<const uint16_t*>(src), count, op,
                          widen_bf16, narrow_bf16);
  }
  throw InvalidArgument("reduce_into: unknown dtype " + std::to_string(static_cast<int>(dtype)));
}

void reduce_last_into(void* dst, const void* src, std::size_t count, DataType dtype, ReduceOp op, int ranks) {
  if (op == ReduceOp::kAverage && ranks > 0) {
    if (dtype == DataType::kFloat32) {
      float* d = static_cast<float*>(dst);
      const float* s = static_cast<const float*>(src);
      if (power_of_two(ranks)) return sum_scale_f32(d, s, count, 1.0f / static_cast<float>(ranks));
      return sum_div_f32(d, s, count, static_cast<float>(ranks));
    }
    if (dtype == DataType::kFloat64) {
      double* d = static_cast<double*>(dst);
      const double* s = static_cast<const double*>(src);
      if (power_of_two(ranks)) return sum_scale_f64(d, s, count, 1.0 / static_cast<double>(ranks));
      return sum_div_f64(d, s, count, static_cast<double>(ranks));
    }
  }
  reduce_into(dst, src, count, dtype, op);
  if (op == ReduceOp::kAverage) divide(dst, count, dtype, ranks);
}

void divide(void* data, std::size_t count, DataType dtype, int divisor) {
  switch (dtype) {
    case DataType::kFloat32: return divide_f32(static_cast<float*>(data), count, divisor);
    case DataType::kFloat64: return divide_f64(static_cast<double*>(data), count, divisor);
    case DataType::kInt32: return divide_typed(static_cast<int32_t*>(data), count, divisor);
    case DataType::kInt64: return divide_typed(static_cast<int64_t*>(data), count, divisor);
    case DataType::kFloat16:
      return divide_16bit(static_cast<uint16_t*>(data), count, divisor, widen_half, narrow_half);
    case DataType::kBFloat16:
      return divide_16bit(static_cast<uint16_t*>(data), count, divisor, widen_bf16, narrow_bf16);
  }
  throw InvalidArgument("divide: unknown dtype " + std::to_string(static_cast<int>(dtype)));
}

}  // namespace muster::runtime::comm
