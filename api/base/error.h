// The floor's one error model: a function that can fail returns
// `Failure`, nullopt on success, else a message that names what failed (the
// path, the program) and why (strerror). Callers above the floor turn it
// into their own model (api::Status in the daemon, exceptions in the
// runtime) in one line. The floor never throws and never logs.
#pragma once

#include <optional>
#include <string>

namespace muster::base {

using Failure = std::optional<std::string>;

}  // namespace muster::base
