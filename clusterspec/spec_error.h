// SpecError: the one error type of clusterspec/.
//
// Error model of this library (used both by the daemon, which speaks Status,
// and by the runtime, which throws):
// - Functions that build or parse something (ClusterSpec::parse,
//   TfConfig::parse, TfConfig::from_env, horovodrun_argv, mpirun_argv,
//   parse_hostfile, shell_quote, ...) throw SpecError when the input is
//   wrong. The message names what is wrong ("TF_CONFIG: task.index 3 out of
//   range: cluster has 2 \"worker\" tasks") and is fit to show a user as is.
// - validate() methods never throw: they return std::nullopt when the value
//   is valid, else the same message a parse would have thrown.
// Daemon code catches SpecError at its boundary and turns what() into an
// invalid_argument Status; runtime code lets it propagate.
#pragma once

#include <stdexcept>
#include <string>

namespace muster::clusterspec {

class SpecError : public std::invalid_argument {
 public:
  explicit SpecError(const std::string& message) : std::invalid_argument(message) {}
};

}  // namespace muster::clusterspec
