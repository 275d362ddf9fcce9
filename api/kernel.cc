#include "api/kernel.h"

#include <unistd.h>

#include <nlohmann/json.hpp>

namespace muster::api {

namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

bool executable_file(const std::string& path) { return ::access(path.c_str(), X_OK) == 0; }

std::vector<std::string> code_command(const KernelCommandOptions& o) {
  const std::string python = kPython3Program, bash = kBashProgram;
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
    cmd = {kPython3Program, "-u", o.script};
  } else {
    cmd = {o.script};  // python3 kernel, an executable that is not a .py
  }
  cmd.insert(cmd.end(), o.args.begin(), o.args.end());
  return cmd;
}

}  // namespace muster::api
