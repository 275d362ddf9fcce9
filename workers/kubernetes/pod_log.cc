#include "workers/kubernetes/pod_log.h"

#include <cctype>

namespace muster::workers::kubernetes {

std::string normalize_log_time(std::string_view t) {
  // YYYY-MM-DDTHH:MM:SS[.frac]Z
  if (t.size() < 20 || t[4] != '-' || t[10] != 'T' || t.back() != 'Z') return "";
  std::string out(t.substr(0, 19));
  std::string frac;
  if (t[19] == '.') {
    for (size_t i = 20; i + 1 < t.size(); ++i) {
      if (!std::isdigit(static_cast<unsigned char>(t[i]))) return "";
      frac += t[i];
    }
  } else if (t.size() != 20) {
    return "";
  }
  frac.resize(9, '0');
  return out + "." + frac + "Z";
}

std::string take_log_lines(LogCursor& cursor, std::string_view chunk) {
  std::string out;
  cursor.partial.append(chunk);
  size_t start = 0;
  for (size_t nl; (nl = cursor.partial.find('\n', start)) != std::string::npos; start = nl + 1) {
    std::string_view line(cursor.partial.data() + start, nl - start + 1);  // with its '\n'
    const auto space = line.find(' ');
    const std::string t = space == std::string_view::npos ? "" : normalize_log_time(line.substr(0, space));
    if (t.empty()) {  // not stamped: keep it as it is
      out.append(line);
      continue;
    }
    if (!cursor.resume_after.empty() && t <= cursor.resume_after) continue;
    cursor.last = t;
    out.append(line.substr(space + 1));
  }
  cursor.partial.erase(0, start);
  return out;
}

std::string since_time(const std::string& normalized) {
  if (normalized.size() < 19) return "";
  return normalized.substr(0, 19) + "Z";
}

}  // namespace muster::workers::kubernetes
