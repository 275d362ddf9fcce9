#include "service/worker_python.h"

#include <cstdlib>
#include <optional>
#include <sstream>
#include <system_error>
#include <vector>

#include "api/base/worker_env.h"

#ifndef MUSTER_SDK_SOURCE_DIR
#define MUSTER_SDK_SOURCE_DIR ""
#endif
#ifndef MUSTER_PYTHON_INSTALL_DIR
#define MUSTER_PYTHON_INSTALL_DIR "lib/python3/dist-packages"
#endif

namespace muster::service {

namespace fs = std::filesystem;

namespace {

constexpr const char* kPythonPath = "PYTHONPATH";
constexpr const char* kRuntimePath = base::kEnvRuntimePath;

bool is_package(const fs::path& dir) {
  std::error_code ec;
  return fs::is_regular_file(dir / "muster" / "__init__.py", ec);
}

// A _muster_runtime extension module (any ABI suffix) in `dir`.
bool has_extension(const fs::path& dir) {
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.rfind("_muster_runtime", 0) == 0 && name.size() > 3 && name.compare(name.size() - 3, 3, ".so") == 0) {
      return true;
    }
  }
  return false;
}

fs::path normal(const fs::path& p) {
  std::error_code ec;
  const fs::path c = fs::weakly_canonical(p, ec);
  return ec ? p.lexically_normal() : c;
}

std::vector<std::string> split_path(const std::string& value) {
  std::vector<std::string> out;
  std::istringstream in(value);
  std::string item;
  while (std::getline(in, item, ':')) out.push_back(item);
  return out;
}

std::optional<std::string> lookup(const std::map<std::string, std::string>& env, const char* name) {
  auto it = env.find(name);
  if (it == env.end()) return std::nullopt;
  return it->second;
}

}  // namespace

WorkerPython find_worker_python(const fs::path& exe_dir, const fs::path& source_sdk_dir,
                                const std::string& python_install_dir) {
  WorkerPython found;
  // a) A build tree (CMake's cache beside bin/).
  std::error_code ec;
  const fs::path built = exe_dir / ".." / "python" / "muster";
  if (fs::exists(exe_dir / ".." / "CMakeCache.txt", ec) && !source_sdk_dir.empty() && is_package(source_sdk_dir)) {
    found.sdk_dir = normal(source_sdk_dir);
    found.found_in = "the build tree " + normal(exe_dir / "..").string();
    if (has_extension(built)) {
      found.runtime_dir = normal(built);
    } else {
      found.found_in += " (its runtime extension is not built yet: make build)";
    }
    return found;
  }
  // b) An install prefix.
  const fs::path installed = exe_dir / ".." / python_install_dir;
  if (is_package(installed)) {
    found.sdk_dir = normal(installed);
    found.found_in = "the install prefix " + normal(exe_dir / "..").string();
  }
  return found;  // c) when empty
}

WorkerPython find_worker_python() {
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (ec) return {};
  return find_worker_python(exe.parent_path(), MUSTER_SDK_SOURCE_DIR, MUSTER_PYTHON_INSTALL_DIR);
}

std::map<std::string, std::string> python_env(const WorkerPython& python,
                                              const std::map<std::string, std::string>& user_env,
                                              const std::map<std::string, std::string>& daemon_env) {
  std::map<std::string, std::string> out;
  if (!python.found()) return out;
  std::optional<std::string> base = lookup(user_env, kPythonPath);
  if (!base) base = lookup(daemon_env, kPythonPath);
  const std::string sdk = python.sdk_dir.string();
  std::string value = base.value_or("");
  bool present = false;
  for (const auto& entry : split_path(value)) {
    if (!entry.empty() && normal(entry) == python.sdk_dir) present = true;
  }
  if (!present) value += (value.empty() ? "" : ":") + sdk;
  out[kPythonPath] = value;
  if (!python.runtime_dir.empty() && !lookup(user_env, kRuntimePath) && !lookup(daemon_env, kRuntimePath)) {
    out[kRuntimePath] = python.runtime_dir.string();
  }
  return out;
}

std::map<std::string, std::string> python_env(const WorkerPython& python,
                                              const std::map<std::string, std::string>& user_env) {
  std::map<std::string, std::string> daemon_env;
  for (const char* name : {kPythonPath, kRuntimePath}) {
    if (const char* v = std::getenv(name)) daemon_env[name] = v;
  }
  return python_env(python, user_env, daemon_env);
}

}  // namespace muster::service
