#include "service/script_path.h"

#include <system_error>

#include "api/worker.h"

namespace muster::service {

namespace fs = std::filesystem;

api::Result<fs::path> resolve_script(const fs::path& project_dir, const std::string& script) {
  if (auto s = api::check_script_path(script, "script"); !s) return s;
  fs::path rel(script);
  std::error_code ec;
  const fs::path root = fs::canonical(project_dir, ec);
  if (ec) return api::internal_error("project directory " + project_dir.string() + " is not accessible");
  const fs::path resolved = fs::canonical(root / rel, ec);
  if (ec) {
    return api::invalid_argument("script '" + script + "' does not exist in the project directory " + root.string(),
                                 "script");
  }
  // Inside the project dir after following every symlink?
  auto r = root.begin();
  auto p = resolved.begin();
  for (; r != root.end(); ++r, ++p) {
    if (p == resolved.end() || *p != *r) {
      return api::invalid_argument("script '" + script + "' resolves to " + resolved.string() +
                                       ", outside the project directory",
                                   "script");
    }
  }
  if (!fs::is_regular_file(resolved, ec)) {
    return api::invalid_argument("script '" + script + "' is not a regular file", "script");
  }
  return resolved;
}

}  // namespace muster::service
