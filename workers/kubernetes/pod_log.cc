#include "workers/kubernetes/pod_log.h"

#include <fcntl.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstring>
#include <utility>

#include <spdlog/spdlog.h>

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

CursorFile::CursorFile(std::filesystem::path path) : path_(std::move(path)) {
  fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
  if (fd_ < 0) {
    spdlog::warn("kubernetes: cannot keep the log's resume point in {}: {}", path_.string(), std::strerror(errno));
  }
}

CursorFile::~CursorFile() {
  if (fd_ >= 0) ::close(fd_);
}

CursorFile::CursorFile(CursorFile&& other) noexcept
    : path_(std::move(other.path_)), fd_(std::exchange(other.fd_, -1)), kept_(std::move(other.kept_)) {}

CursorFile& CursorFile::operator=(CursorFile&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    path_ = std::move(other.path_);
    fd_ = std::exchange(other.fd_, -1);
    kept_ = std::move(other.kept_);
  }
  return *this;
}

void CursorFile::keep(const std::string& normalized) {
  if (fd_ < 0 || normalized.empty() || normalized == kept_) return;
  const std::string line = normalized + "\n";
  const ssize_t n = ::pwrite(fd_, line.data(), line.size(), 0);
  if (n != static_cast<ssize_t>(line.size())) {
    spdlog::warn("kubernetes: cannot keep the log's resume point in {}: {}", path_.string(),
                 n < 0 ? std::strerror(errno) : "a short write");
    return;
  }
  if (kept_.empty() && ::ftruncate(fd_, static_cast<off_t>(line.size())) != 0) {
    // (a longer file from before: its tail after the newline is never read)
    spdlog::debug("kubernetes: truncating {}: {}", path_.string(), std::strerror(errno));
  }
  kept_ = normalized;
}

}  // namespace muster::workers::kubernetes
