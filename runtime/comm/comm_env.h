// CommOptions from the environment: the MUSTER_COMM_* variables listed in
// runtime/comm/README.md override the fields given in code, and the result
// is checked. Throws InvalidArgument naming the variable or field at fault.
#pragma once

#include "runtime/comm/communicator.h"

namespace muster::runtime::comm {

CommOptions apply_env(CommOptions options);

// The integer in environment variable `name`, or `fallback` when it is unset
// or empty; throws InvalidArgument unless it is a non-negative int.
int env_int(const char* name, int fallback);

}  // namespace muster::runtime::comm
