#include "service/state_dir_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

namespace muster::service {

api::Result<StateDirLock> StateDirLock::acquire(const std::filesystem::path& state_dir) {
  const auto path = state_dir / "musterd.lock";
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) return api::internal_error("cannot open " + path.string() + ": " + std::strerror(errno));
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    char buf[32] = {};
    const ssize_t n = ::pread(fd, buf, sizeof buf - 1, 0);
    ::close(fd);
    if (err != EWOULDBLOCK) return api::internal_error("cannot lock " + path.string() + ": " + std::strerror(err));
    std::string holder = n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string();
    while (!holder.empty() && (holder.back() == '\n' || holder.back() == ' ')) holder.pop_back();
    return api::unavailable("another musterd (pid " + (holder.empty() ? std::string("unknown") : holder) +
                            ") is using the state directory " + state_dir.string() + " (it holds " + path.string() +
                            "); stop it first, or give this one another --state-dir");
  }
  // The pid is only for a second daemon's message: on a full disk it stays
  // unwritten and that message says "unknown", the lock holds all the same.
  const std::string pid = std::to_string(::getpid()) + "\n";
  if (::ftruncate(fd, 0) == 0 && ::pwrite(fd, pid.data(), pid.size(), 0) == static_cast<ssize_t>(pid.size())) {
    ::fdatasync(fd);
  }
  return StateDirLock(fd);
}

StateDirLock::~StateDirLock() {
  if (fd_ >= 0) ::close(fd_);
}

}  // namespace muster::service
