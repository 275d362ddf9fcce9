#include "api/base/rotating_log.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

namespace muster::base {

namespace fs = std::filesystem;

namespace {

constexpr std::string_view kMarkerPrefix = "[muster] log rotated: this file starts at byte ";

std::string errno_text(const std::string& what) { return what + ": " + std::strerror(errno); }

Failure write_all(int fd, std::string_view data, const fs::path& path) {
  while (!data.empty()) {
    const ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno_text("writing " + path.string());
    }
    data.remove_prefix(static_cast<size_t>(n));
  }
  return std::nullopt;
}

int open_append(const fs::path& path, bool truncate) {
  return ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | (truncate ? O_TRUNC : 0), 0644);
}

uint64_t size_of(const fs::path& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 ? static_cast<uint64_t>(st.st_size) : 0;
}

// The first bytes of `path` (enough for a marker line).
std::string head_of(const fs::path& path) {
  std::string out(512, '\0');
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return "";
  const ssize_t n = ::read(fd, out.data(), out.size());
  ::close(fd);
  out.resize(n > 0 ? static_cast<size_t>(n) : 0);
  return out;
}

bool read_number(std::string_view& text, uint64_t& out) {
  size_t i = 0;
  out = 0;
  while (i < text.size() && text[i] >= '0' && text[i] <= '9' && i < 20) {
    out = out * 10 + static_cast<uint64_t>(text[i] - '0');
    ++i;
  }
  if (i == 0) return false;
  text.remove_prefix(i);
  return true;
}

bool eat(std::string_view& text, std::string_view word) {
  if (text.substr(0, word.size()) != word) return false;
  text.remove_prefix(word.size());
  return true;
}

}  // namespace

Failure validate(const RotatingLogOptions& options) {
  if (options.max_bytes < kMinLogBytes) {
    return "max_bytes must be at least " + std::to_string(kMinLogBytes) + ", not " + std::to_string(options.max_bytes);
  }
  if (options.keep > kMaxLogKeep) {
    return "keep must be at most " + std::to_string(kMaxLogKeep) + ", not " + std::to_string(options.keep);
  }
  return std::nullopt;
}

fs::path rotated_path(const fs::path& path, unsigned i) { return fs::path(path.string() + "." + std::to_string(i)); }

std::string rotation_marker(uint64_t base_offset, uint64_t dropped, const fs::path& path,
                            const RotatingLogOptions& options) {
  std::string line(kMarkerPrefix);
  line += std::to_string(base_offset) + " of the log; " + std::to_string(dropped) + " bytes dropped (cap " +
          std::to_string(options.max_bytes) + " bytes, ";
  if (options.keep == 0) {
    line += "no rotated file kept)";
  } else {
    line += std::to_string(options.keep) + " rotated file" + (options.keep == 1 ? "" : "s") + " kept: " +
            rotated_path(path.filename(), 1).string() + (options.keep > 1 ? " is the newest" : "") + ")";
  }
  return line + "\n";
}

std::optional<RotationMarker> parse_rotation_marker(std::string_view text) {
  const size_t nl = text.find('\n');
  if (nl == std::string_view::npos) return std::nullopt;
  std::string_view line = text.substr(0, nl);
  RotationMarker m;
  if (!eat(line, kMarkerPrefix) || !read_number(line, m.base_offset) || !eat(line, " of the log; ") ||
      !read_number(line, m.dropped) || !eat(line, " bytes dropped")) {
    return std::nullopt;
  }
  m.length = nl + 1;
  return m;
}

LogFileInfo describe_log(const fs::path& path) {
  LogFileInfo info;
  info.size = size_of(path);
  if (info.size > 0) {
    if (auto m = parse_rotation_marker(head_of(path))) {
      info.base_offset = m->base_offset;
      info.dropped = m->dropped;
      info.marker_length = m->length;
    }
  }
  std::error_code ec;
  for (unsigned i = 1; i <= kMaxLogKeep; ++i) {
    const fs::path p = rotated_path(path, i);
    if (!fs::exists(p, ec)) break;
    info.rotated.push_back(p);
  }
  return info;
}

std::unique_ptr<RotatingLog> RotatingLog::open(const fs::path& path, const RotatingLogOptions& options,
                                               std::string* error) {
  if (auto bad = validate(options)) {
    if (error) *error = *bad;
    return nullptr;
  }
  std::unique_ptr<RotatingLog> log(new RotatingLog(path, options));
  log->fd_ = open_append(path, false);
  if (log->fd_ < 0) {
    if (error) *error = errno_text("opening " + path.string());
    return nullptr;
  }
  const LogFileInfo info = describe_log(path);
  log->size_ = info.size;
  log->base_ = info.base_offset;
  log->dropped_ = info.dropped;
  return log;
}

RotatingLog::~RotatingLog() {
  if (fd_ >= 0) ::close(fd_);
}

Failure RotatingLog::rotate() {
  std::error_code ec;
  if (options_.keep == 0) {
    dropped_ += size_;
    fs::remove(path_, ec);
  } else {
    const fs::path oldest = rotated_path(path_, options_.keep);
    if (fs::exists(oldest, ec)) {
      dropped_ += size_of(oldest);
      fs::remove(oldest, ec);
    }
    for (unsigned i = options_.keep; i-- > 1;) {
      const fs::path from = rotated_path(path_, i);
      if (fs::exists(from, ec)) fs::rename(from, rotated_path(path_, i + 1), ec);
    }
    fs::rename(path_, rotated_path(path_, 1), ec);
    if (ec) return "rotating " + path_.string() + ": " + ec.message();
  }
  base_ += size_;
  size_ = 0;
  ++rotations_;
  const int fd = open_append(path_, true);
  if (fd < 0) return errno_text("opening " + path_.string());
  ::close(fd_);
  fd_ = fd;
  return append(rotation_marker(base_, dropped_, path_, options_));
}

Failure RotatingLog::append(std::string_view data) {
  if (auto f = write_all(fd_, data, path_)) return f;
  size_ += data.size();
  return std::nullopt;
}

Failure RotatingLog::write(std::string_view data) {
  Failure failure;
  while (!data.empty() && !failure) {
    if (size_ >= options_.max_bytes) failure = rotate();
    if (failure) break;
    const uint64_t room = options_.max_bytes - size_;
    if (data.size() <= room) {
      failure = append(data);
      break;
    }
    // The write crosses the cap: end this file at the last line end that
    // fits (else at the cap), then rotate on the next round.
    size_t take = static_cast<size_t>(room);
    const void* nl = ::memrchr(data.data(), '\n', take);
    if (nl) take = static_cast<size_t>(static_cast<const char*>(nl) - data.data()) + 1;
    failure = append(data.substr(0, take));
    data.remove_prefix(take);
    if (!failure) failure = rotate();
  }
  if (!failure) {
    failing_ = false;
    return std::nullopt;
  }
  if (failing_) return std::nullopt;  // reported once per episode
  failing_ = true;
  return failure;
}

}  // namespace muster::base
