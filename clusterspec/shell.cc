#include "clusterspec/shell.h"

#include "api/base/shell_quote.h"
#include "clusterspec/spec_error.h"

namespace muster::clusterspec {

// The rules live in api/base/shell_quote.h; clusterspec adds its own error
// model (SpecError) for the one input a shell word cannot carry.
namespace {

void reject_nul(const std::string& arg) {
  if (base::contains_nul(arg)) {
    throw SpecError("cannot pass an argument containing a NUL byte to a command");
  }
}

}  // namespace

std::string shell_quote(const std::string& arg) {
  reject_nul(arg);
  return base::shell_quote(arg);
}

std::string join_for_shell(const std::vector<std::string>& argv) {
  for (const auto& arg : argv) reject_nul(arg);
  return base::join_for_shell(argv);
}

}  // namespace muster::clusterspec
