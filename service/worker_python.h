// WorkerPython: where the Python of a program musterd starts finds muster's
// own Python parts (the `muster` package: the SDK, muster.torch, and the
// runtime extensions _muster_runtime / _muster_ps), however musterd itself
// was started (from a shell with or without PYTHONPATH, by systemd, ...).
//
// Where musterd looks, relative to its own program (/proc/self/exe):
//   a) a build tree (<exe dir>/../CMakeCache.txt): the SDK is the source
//      tree's sdk/python, which the build names (MUSTER_SDK_SOURCE_DIR), and
//      <exe dir>/../python/muster holds the extensions once built
//      (runtime/python/CMakeLists.txt builds them there);
//   b) an install prefix (`cmake --install build --prefix P`, musterd in
//      P/bin): P/<python install dir>/muster is the package with the
//      extensions beside it;
//   c) neither: nothing is added, and workers import muster as their Python
//      finds it (`pip install ./sdk/python`); musterd says so when it starts.
//
// What a worker gets (python_env): PYTHONPATH = the user's PYTHONPATH (the
// request's env, else musterd's own environment), then the SDK's folder
// unless it is already there, so the user's entries come first and none is
// dropped; MUSTER_RUNTIME_PATH = the extensions' folder (muster/runtime.py
// looks there), unless the user set it (in the request or musterd's own
// environment). Every backend passes this on to the
// agent and so to the script (ps tasks included); mpi clusters give it to
// mpirun's environment and forward it to every rank with -x.
#pragma once

#include <filesystem>
#include <map>
#include <string>

namespace muster::service {

struct WorkerPython {
  std::filesystem::path sdk_dir;      // the folder holding the `muster` package ("" = none found)
  std::filesystem::path runtime_dir;  // the folder holding _muster_runtime*.so ("" = beside the package, or none)
  std::string found_in;               // for musterd's log: "the build tree <dir>", "the install prefix <dir>"

  bool found() const { return !sdk_dir.empty(); }
};

// Looks for a) then b) relative to `exe_dir` (the folder of musterd's
// program); `source_sdk_dir` is the build's sdk/python (a). Returns an empty
// WorkerPython for c).
WorkerPython find_worker_python(const std::filesystem::path& exe_dir, const std::filesystem::path& source_sdk_dir,
                                const std::string& python_install_dir);
// The same for this musterd (its own program and the build's paths).
WorkerPython find_worker_python();

// The variables to set for a worker (see the top of this file). `user_env`
// is what the request sets; `daemon_env` is musterd's own environment (only
// PYTHONPATH and MUSTER_RUNTIME_PATH are read). Empty when `python` found
// nothing.
std::map<std::string, std::string> python_env(const WorkerPython& python,
                                              const std::map<std::string, std::string>& user_env,
                                              const std::map<std::string, std::string>& daemon_env);
// The same with musterd's own environment.
std::map<std::string, std::string> python_env(const WorkerPython& python,
                                              const std::map<std::string, std::string>& user_env);

}  // namespace muster::service
