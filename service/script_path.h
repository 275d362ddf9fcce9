// resolve_script: where a worker's script is, by the one rule POST /workers
// (validation.h) and a cluster's tasks (cluster/tasks.h) share: the path,
// canonical (every symlink followed), of an existing regular file inside the
// project directory; no absolute path, no `..` escape, no symlink pointing
// out. The form of the path alone: api::check_script_path (api/worker.h).
#pragma once

#include <filesystem>
#include <string>

#include "api/status.h"

namespace muster::service {

// The canonical path of `script` inside `project_dir`, or why not (the
// error names the field "script").
api::Result<std::filesystem::path> resolve_script(const std::filesystem::path& project_dir, const std::string& script);

}  // namespace muster::service
