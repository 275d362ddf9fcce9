// Element types the runtime moves and reduces, shared by the collectives,
// the parameter-server wire format and checkpoints. The numeric values are
// part of the PS wire format: never renumber.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace muster::runtime {

enum class DataType : uint8_t {
  kFloat32 = 1,
  kFloat64 = 2,
  kFloat16 = 3,
  kBFloat16 = 4,
  kInt32 = 5,
  kInt64 = 6,
};

inline std::size_t dtype_size(DataType t) {
  switch (t) {
    case DataType::kFloat32: return 4;
    case DataType::kFloat64: return 8;
    case DataType::kFloat16: return 2;
    case DataType::kBFloat16: return 2;
    case DataType::kInt32: return 4;
    case DataType::kInt64: return 8;
  }
  return 0;
}

inline const char* dtype_name(DataType t) {
  switch (t) {
    case DataType::kFloat32: return "float32";
    case DataType::kFloat64: return "float64";
    case DataType::kFloat16: return "float16";
    case DataType::kBFloat16: return "bfloat16";
    case DataType::kInt32: return "int32";
    case DataType::kInt64: return "int64";
  }
  return "unknown";
}

// True for the numeric values a DataType may take (for checking wire input).
inline bool dtype_valid(uint8_t raw) { return raw >= 1 && raw <= 6; }

}  // namespace muster::runtime
