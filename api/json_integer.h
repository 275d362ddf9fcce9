// json_integer: a JSON number read as an integer the way JSON Schema (and so
// api/openapi.yaml's `type: integer`) reads it: 3 and 3.0 are both the
// integer 3 (Python's json writes 3.0 for a float holding a whole number);
// 3.5, strings, booleans and null are not integers.
#pragma once

#include <cmath>
#include <cstdint>
#include <optional>

#include <nlohmann/json.hpp>

namespace muster::api {

inline std::optional<int64_t> json_integer(const nlohmann::json& v) {
  if (v.is_number_unsigned()) {
    const uint64_t u = v.get<uint64_t>();
    if (u > static_cast<uint64_t>(INT64_MAX)) return INT64_MAX;  // out of every range the API has
    return static_cast<int64_t>(u);
  }
  if (v.is_number_integer()) return v.get<int64_t>();
  if (v.is_number_float()) {
    const double d = v.get<double>();
    if (!std::isfinite(d) || std::trunc(d) != d) return std::nullopt;
    if (d >= 9.2e18) return INT64_MAX;
    if (d <= -9.2e18) return INT64_MIN;
    return static_cast<int64_t>(d);
  }
  return std::nullopt;
}

}  // namespace muster::api
