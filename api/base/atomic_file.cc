#include "api/base/atomic_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>

namespace muster::base {
namespace fs = std::filesystem;

namespace {

std::atomic<unsigned> g_counter{0};

std::string errno_text() { return std::strerror(errno); }

}  // namespace

AtomicFile::AtomicFile(fs::path target, AtomicFileOptions options) : target_(std::move(target)) {
  fs::path dir = target_.parent_path();
  if (dir.empty()) dir = ".";
  temp_ = dir / ("." + target_.filename().string() + ".tmp." + std::to_string(::getpid()) + "." +
                 std::to_string(g_counter.fetch_add(1)));
  fd_ = ::open(temp_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, options.mode);
  if (fd_ < 0) {
    fail("cannot create " + temp_.string());
    return;
  }
  // open() applies the umask; the caller asked for exactly `mode`.
  if (::fchmod(fd_, options.mode) != 0) fail("cannot set the mode of " + temp_.string());
}

AtomicFile::~AtomicFile() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_ && !temp_.empty()) ::unlink(temp_.c_str());
}

void AtomicFile::fail(const std::string& what) {
  if (!failure_) failure_ = what + ": " + errno_text();
}

void AtomicFile::write(const void* data, std::size_t size) {
  if (failure_ || fd_ < 0) return;
  const char* p = static_cast<const char*>(data);
  while (size > 0) {
    const ssize_t n = ::write(fd_, p, size);
    if (n < 0) {
      if (errno == EINTR) continue;
      fail("cannot write " + temp_.string());
      return;
    }
    p += n;
    size -= static_cast<std::size_t>(n);
  }
}

Failure AtomicFile::commit() {
  if (committed_) return "commit of " + target_.string() + " called twice";
  if (failure_) return failure_;
  if (::fsync(fd_) != 0) {
    fail("cannot fsync " + temp_.string());
    return failure_;
  }
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) {
    fail("cannot close " + temp_.string());
    return failure_;
  }
  if (::rename(temp_.c_str(), target_.c_str()) != 0) {
    fail("cannot rename " + temp_.string() + " to " + target_.string());
    return failure_;
  }
  committed_ = true;
  fs::path dir = target_.parent_path();
  return sync_directory(dir.empty() ? fs::path(".") : dir);
}

Failure write_file_atomically(const fs::path& target, std::string_view content, AtomicFileOptions options) {
  AtomicFile file(target, options);
  file.write(content);
  return file.commit();
}

Failure sync_directory(const fs::path& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return "cannot open directory " + dir.string() + ": " + errno_text();
  Failure out;
  if (::fsync(fd) != 0) out = "cannot fsync directory " + dir.string() + ": " + errno_text();
  ::close(fd);
  return out;
}

}  // namespace muster::base
