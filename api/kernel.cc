#include "api/kernel.h"

#include <sys/stat.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

namespace muster::api {

namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

bool executable_file(const std::string& path) { return ::access(path.c_str(), X_OK) == 0; }

std::string python_of(const KernelCommandOptions& o) { return o.python.empty() ? kPython3Program : o.python; }

std::vector<std::string> code_command(const KernelCommandOptions& o) {
  const std::string python = python_of(o), bash = kBashProgram;
  const size_t first = o.code.find_first_not_of(" \t\n");
  const bool shell_only =
      first != std::string::npos && o.code[first] == '!' && o.code.find('\n', first) == std::string::npos;
  if (o.kernel == "bash") return {bash, "-c", o.code, "muster-worker"};
  // cdsw's `code="!nvidia-smi"`: one shell command, its exit code is the worker's.
  if (shell_only) return {bash, "-c", o.code.substr(first + 1), "muster-worker"};
  if (o.code.find('!') != std::string::npos) return {python, "-u", "-c", python_with_shell_lines(o.code)};
  return {python, "-u", "-c", o.code};
}

}  // namespace

Status check_python(const std::string& python, const std::string& field) {
  if (python.empty()) return Status::ok();
  const std::string hint = "; give the absolute path of a Python interpreter on the workers' hosts "
                           "(the SDK sends the notebook's own, sys.executable), or leave it out for " +
                           std::string(kPython3Program);
  if (python.find('\0') != std::string::npos) return invalid_argument(field + " must not contain NUL characters", field);
  if (python[0] != '/') return invalid_argument(field + " '" + python + "' is not an absolute path" + hint, field);
  struct stat st {};
  if (::stat(python.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) {
    return invalid_argument(field + " '" + python + "' does not exist (or is not a file) on musterd's host" + hint,
                            field);
  }
  if (!executable_file(python)) return invalid_argument(field + " '" + python + "' is not executable" + hint, field);
  return Status::ok();
}

std::string python_with_shell_lines(const std::string& code) {
  std::string out;
  size_t start = 0;
  while (start <= code.size()) {
    size_t end = code.find('\n', start);
    if (end == std::string::npos) end = code.size();
    const std::string line = code.substr(start, end - start);
    const size_t first = line.find_first_not_of(" \t");
    if (first != std::string::npos && line[first] == '!') {
      // One expression on the line's own line (tracebacks keep their line
      // numbers): run the command in bash, and end the script with its exit
      // code unless that is 0. A JSON string is a valid Python literal.
      out += line.substr(0, first) + "(lambda _c: _c and __import__('sys').exit(_c))(__import__('subprocess').call(" +
             nlohmann::json(line.substr(first + 1)).dump() + ", shell=True, executable='/bin/bash'))";
    } else {
      out += line;
    }
    if (end == code.size()) break;
    out += '\n';
    start = end + 1;
  }
  return out;
}

std::vector<std::string> script_command(const KernelCommandOptions& o) {
  std::vector<std::string> cmd;
  const auto is_executable = o.is_executable ? o.is_executable : executable_file;
  if (!o.code.empty()) {
    cmd = code_command(o);
  } else if (o.kernel == "bash" || ends_with(o.script, ".sh")) {
    cmd = {kBashProgram, o.script};
  } else if (o.kernel == "executable") {
    cmd = {o.script};
  } else if (ends_with(o.script, ".py") || !is_executable(o.script)) {
    cmd = {python_of(o), "-u", o.script};
  } else {
    cmd = {o.script};  // python3 kernel, an executable that is not a .py
  }
  cmd.insert(cmd.end(), o.args.begin(), o.args.end());
  return cmd;
}

}  // namespace muster::api
