#include "api/base/shell_quote.h"

#include <cctype>

namespace muster::base {
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

bool contains_nul(std::string_view text) { return text.find('\0') != std::string_view::npos; }

std::string shell_quote(std::string_view arg) {
  bool plain = !arg.empty();
  for (char c : arg) {
    if (!is_plain(c)) {
      plain = false;
      break;
    }
  }
  if (plain) return std::string(arg);
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

}  // namespace muster::base
