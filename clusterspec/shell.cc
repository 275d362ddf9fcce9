#include "muster/clusterspec/shell.h"

#include <cctype>

#include "muster/clusterspec/spec_error.h"

namespace muster::clusterspec {
namespace {

// Characters no POSIX shell treats specially anywhere in a word. '=' and ':'
// are safe inside a word; '~' and '#' are not at its start, so they are left
// out altogether.
bool is_plain(char c) {
  if (std::isalnum(static_cast<unsigned char>(c))) return true;
  switch (c) {
    case '_': case '-': case '.': case '/': case ',': case ':': case '=': case '+': case '@': case '%':
      return true;
    default:
      return false;
  }
}

}  // namespace

std::string shell_quote(const std::string& arg) {
  if (arg.find('\0') != std::string::npos) {
    throw SpecError("cannot pass an argument containing a NUL byte to a command");
  }
  bool plain = !arg.empty();
  for (char c : arg) {
    if (!is_plain(c)) {
      plain = false;
      break;
    }
  }
  if (plain) return arg;
  std::string out = "'";
  for (char c : arg) {
    if (c == '\'') {
      out += "'\\''";
    } else {
      out += c;
    }
  }
  out += '\'';
  return out;
}

std::string join_for_shell(const std::vector<std::string>& argv) {
  std::string out;
  for (const auto& arg : argv) {
    if (!out.empty()) out += ' ';
    out += shell_quote(arg);
  }
  return out;
}

}  // namespace muster::clusterspec
