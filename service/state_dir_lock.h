// StateDirLock: one musterd per state directory. A second daemon on the same
// --state-dir would take over musterd.json (so the SDK follows it), then
// fail the first daemon's running workers and kill them; instead it exits at
// once, naming the daemon that holds the directory.
//
// The lock is flock(LOCK_EX | LOCK_NB) on <state-dir>/musterd.lock, held
// (CLOEXEC: never by a launched program) for the daemon's life. The kernel
// releases it when the process dies, so a daemon killed with -9 leaves no
// stale lock behind. The file holds the holder's pid, for the message.
#pragma once

#include <filesystem>

#include "api/status.h"

namespace muster::service {

class StateDirLock {
 public:
  // Takes the lock, or fails (unavailable) naming the pid that holds it.
  static api::Result<StateDirLock> acquire(const std::filesystem::path& state_dir);
  StateDirLock(StateDirLock&& other) noexcept : fd_(other.fd_) { other.fd_ = -1; }
  StateDirLock& operator=(StateDirLock&&) = delete;
  StateDirLock(const StateDirLock&) = delete;
  ~StateDirLock();

 private:
  explicit StateDirLock(int fd) : fd_(fd) {}
  int fd_;
};

}  // namespace muster::service
