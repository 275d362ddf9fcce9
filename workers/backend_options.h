// The readers every backend's `--backend-opt key=value` loop uses, so that a
// value means the same on every backend: base::Settings' one boolean dialect
// (true, false, 1 or 0) and its one integer dialect (decimal, the whole text:
// `22x` is an error, not 22). A refusal names the option and the value, and
// carries the key as the error's field.
#pragma once

#include <string>

#include "api/base/settings.h"
#include "api/status.h"

namespace muster::workers {

inline api::Result<bool> bool_option(const std::string& key, const std::string& value) {
  if (auto b = base::parse_bool(value)) return *b;
  return api::invalid_argument("--backend-opt " + key + "='" + value + "': expected true, false, 1 or 0", key);
}

// An integer within [lo, hi]; `what` says what it is ("a port number").
inline api::Result<long long> integer_option(const std::string& key, const std::string& value, long long lo,
                                             long long hi, const std::string& what) {
  const auto v = base::parse_integer(value);
  if (v && *v >= lo && *v <= hi) return *v;
  return api::invalid_argument("--backend-opt " + key + "='" + value + "': not " + what + " (" + std::to_string(lo) +
                                   ".." + std::to_string(hi) + ")",
                               key);
}

}  // namespace muster::workers
