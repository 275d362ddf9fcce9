// Durable, atomic file writes: a reader (or a daemon restarted after a
// crash or a power cut) sees either the old file or the whole new one, never
// a torn one.
//
// Contract
// - AtomicFile writes into a temporary file in the target's own directory
//   (".<name>.tmp.<pid>.<n>", so the rename never crosses file systems),
//   created with `mode` (0600 for secrets: the content is never readable by
//   others, not even for a moment). commit() flushes it, fsyncs it, renames
//   it over the target and fsyncs the directory, so once commit() returns
//   the new content survives a crash. Any failure names the path and errno.
// - An AtomicFile that is destroyed without a successful commit() removes
//   its temporary file; the target is untouched.
// - write_file_atomically() is the one-call form for content in memory.
// - Not thread-safe; one writer per AtomicFile. Two writers of one target
//   each write their own temporary; the last rename wins.
//
//   if (auto err = base::write_file_atomically(dir / "token", token + "\n", {0600})) return fail(*err);
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <filesystem>
#include <string>
#include <string_view>

#include "api/base/error.h"

namespace muster::base {

struct AtomicFileOptions {
  mode_t mode = 0644;  // of the new file (the umask does not apply)
};

class AtomicFile {
 public:
  explicit AtomicFile(std::filesystem::path target, AtomicFileOptions options = {});
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  // The first failure (opening or writing); later writes are ignored then.
  const Failure& failure() const { return failure_; }
  // Appends `size` bytes (retrying short writes).
  void write(const void* data, std::size_t size);
  void write(std::string_view text) { write(text.data(), text.size()); }
  // fsync, rename over the target, fsync the directory. Call once.
  [[nodiscard]] Failure commit();

 private:
  void fail(const std::string& what);

  std::filesystem::path target_;
  std::filesystem::path temp_;
  int fd_ = -1;
  bool committed_ = false;
  Failure failure_;
};

[[nodiscard]] Failure write_file_atomically(const std::filesystem::path& target, std::string_view content,
                                            AtomicFileOptions options = {});

// fsync of a directory (after creating, renaming or removing entries in it).
[[nodiscard]] Failure sync_directory(const std::filesystem::path& dir);

}  // namespace muster::base
