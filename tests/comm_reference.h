// The allreduce tests' reference: deterministic inputs input(rank, i) and
// the expected reduction computed independently, in double, element by
// element (comm_allreduce_test, comm_shared_test).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "runtime/comm/communicator.h"
#include "runtime/comm/half.h"

namespace muster::runtime::comm::testing::reference {

// Small values with at most one binary fraction digit: every partial sum of
// up to 4 ranks is exact even in bfloat16, so sum/min/max must match exactly
// whatever order an algorithm adds in.
inline double input(int rank, std::size_t i, DataType t) {
  const double base = static_cast<double>((i * 7 + static_cast<std::size_t>(rank) * 13) % 17) - 8.0;
  if (t == DataType::kInt32 || t == DataType::kInt64) return base + rank;
  return base + 0.5 * (rank % 2);
}

inline void store(void* buf, std::size_t i, DataType t, double v) {
  switch (t) {
    case DataType::kFloat32: static_cast<float*>(buf)[i] = static_cast<float>(v); break;
    case DataType::kFloat64: static_cast<double*>(buf)[i] = v; break;
    case DataType::kFloat16: static_cast<uint16_t*>(buf)[i] = float_to_half(static_cast<float>(v)); break;
    case DataType::kBFloat16: static_cast<uint16_t*>(buf)[i] = float_to_bfloat16(static_cast<float>(v)); break;
    case DataType::kInt32: static_cast<int32_t*>(buf)[i] = static_cast<int32_t>(v); break;
    case DataType::kInt64: static_cast<int64_t*>(buf)[i] = static_cast<int64_t>(v); break;
  }
}

inline double load(const void* buf, std::size_t i, DataType t) {
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

inline double expected(std::size_t i, DataType t, ReduceOp op, int size) {
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

inline double tolerance(DataType t, ReduceOp op, double ref) {
  if (op != ReduceOp::kAverage) return 0.0;
  switch (t) {
    case DataType::kFloat16: return std::abs(ref) * 1e-3 + 1e-3;
    case DataType::kBFloat16: return std::abs(ref) * 8e-3 + 8e-3;
    case DataType::kFloat32: return std::abs(ref) * 1e-6 + 1e-6;
    case DataType::kFloat64: return std::abs(ref) * 1e-12;
    default: return 0.0;
  }
}

inline std::vector<char> make_input(std::size_t count, DataType t, int rank) {
  std::vector<char> buf(count * dtype_size(t) + 1);
  for (std::size_t i = 0; i < count; ++i) store(buf.data(), i, t, input(rank, i, t));
  return buf;
}

// Returns the number of mismatching elements (and reports the first few).
inline std::size_t check_result(const std::vector<char>& buf, std::size_t count, DataType t, ReduceOp op, int size) {
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

}  // namespace muster::runtime::comm::testing::reference
