// Kernels: how a worker's script or code becomes a command line. The one
// place these rules live: the agent runs a worker's script with them
// (workers/agent/), the cluster manager runs every MPI rank's command with
// them (service/cluster/mpi_mode.cc), so a script behaves the same as a worker
// and as a rank. api/openapi.yaml documents them for callers.
//
// Rules for a script (after it, the caller's args):
//   kernel bash, or a .sh file           /bin/bash SCRIPT
//   kernel executable                    SCRIPT
//   kernel python3 and a .py file        PYTHON -u SCRIPT
//   kernel python3, executable file      SCRIPT            (a binary, a #! script)
//   kernel python3, any other file       PYTHON -u SCRIPT
// Rules for code (kernel python3 or bash):
//   bash                                 /bin/bash -c CODE muster-worker
//   python3, one `!command` line         /bin/bash -c COMMAND muster-worker   (cdsw's shell escape)
//   python3 with `!` lines among Python  PYTHON -u -c PY  (each `!` line a bash call; a
//                                        non-zero exit code ends the script with that code)
//   python3                              PYTHON -u -c CODE
//
// PYTHON is the request's `python` (launch and cluster requests alike): the
// absolute path of an interpreter on the workers' hosts, checked by
// check_python() (the SDK sends the notebook's own, sys.executable, when it
// can run muster's runtime); without one, Debian's /usr/bin/python3 (the one
// with torch and the runtime's extension). Never whichever python3 comes
// first on a PATH. Workers find muster's own package whatever the
// interpreter (service/worker_python.h); its other packages are its own.
// These rules are the only ones: the SDKs send `code` as the user wrote it.
//
//   script_command({.kernel = "python3", .script = "/p/train.py", .args = {"--epochs", "2"}})
//   // -> {"/usr/bin/python3", "-u", "/p/train.py", "--epochs", "2"}
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "api/status.h"

namespace muster::api {

inline constexpr const char* kPython3Program = "/usr/bin/python3";
inline constexpr const char* kBashProgram = "/bin/bash";

struct KernelCommandOptions {
  std::string kernel = "python3";  // python3, bash or executable (api/worker.h kKernel*)
  std::string script;              // the script's path as the process will see it ("" with code)
  std::string code;                // inline code ("" with a script)
  std::vector<std::string> args;   // appended to the command
  std::string python{};            // PYTHON above; "" = kPython3Program
  // Whether the script file may be executed directly (the seam for the one
  // side effect: the default asks access(X_OK)).
  std::function<bool(const std::string& path)> is_executable;
};

// The command line for `options` (rules above).
std::vector<std::string> script_command(const KernelCommandOptions& options);

// `python` as a request gives it (field `field`): "" (the default
// interpreter), or the absolute path of an executable file on this host;
// otherwise invalid_argument saying what to give instead.
Status check_python(const std::string& python, const std::string& field);

// The Python for `code` with each `!command` line turned into a shell call.
std::string python_with_shell_lines(const std::string& code);

}  // namespace muster::api
