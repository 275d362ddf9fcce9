// RotatingLog: an append-only log file with a size cap. The one writer of
// worker and cluster logs (the agent's log relay, the ssh backend's stream
// from a remote agent, the mpirun launcher's relay), and the one reader of
// what it leaves behind.
//
// Contract
// - `path` never grows past `max_bytes`. A write that would pass it ends the
//   file (at the last line end that fits, else mid-line at the cap), then
//   rotates: `path.keep` is deleted (its bytes count as dropped),
//   `path.(i)` becomes `path.(i+1)`, `path` becomes `path.1` (keep = 0:
//   `path` is deleted), and a new `path` starts with one marker line
//   (rotation_marker()), then the rest of the write. So the files on disk
//   never hold more than (keep + 1) * max_bytes.
// - Offsets are absolute: byte N of the log is byte N since the log began,
//   across rotations. The marker line names the absolute offset of the
//   file's first byte (the marker's own) and the bytes dropped so far, so a
//   reader learns what was cut from the file alone (describe_log()).
// - A write error (a full disk) is reported once per episode through the
//   returned Failure; the bytes of a failed write are lost, later writes are
//   tried again. Nothing here throws or logs.
// - One RotatingLog per file, used by one thread at a time. Readers may read
//   the files at any time: a rename never changes bytes already written.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "api/base/error.h"

namespace muster::base {

struct RotatingLogOptions {
  uint64_t max_bytes = 64ull << 20;  // of one file; at least kMinLogBytes
  unsigned keep = 1;                 // rotated files kept: path.1 .. path.keep
};
inline constexpr uint64_t kMinLogBytes = 4096;
inline constexpr unsigned kMaxLogKeep = 100;

// Names the option at fault ("max_bytes must be at least 4096") or nullopt.
Failure validate(const RotatingLogOptions& options);

class RotatingLog {
 public:
  // Opens `path` for appending (created 0644, its directory must exist). An
  // existing file is continued: its size counts against the cap, and its
  // marker line (if any) gives the offsets.
  static std::unique_ptr<RotatingLog> open(const std::filesystem::path& path, const RotatingLogOptions& options,
                                           std::string* error);
  ~RotatingLog();
  RotatingLog(const RotatingLog&) = delete;
  RotatingLog& operator=(const RotatingLog&) = delete;

  // Appends `data`, rotating as the contract says. A Failure is returned for
  // the first failed write of an episode (nullopt again once one succeeds).
  Failure write(std::string_view data);

  const std::filesystem::path& path() const { return path_; }
  uint64_t file_bytes() const { return size_; }     // of the current file
  uint64_t base_offset() const { return base_; }    // absolute offset of its first byte
  uint64_t dropped_bytes() const { return dropped_; }
  uint64_t rotations() const { return rotations_; }

 private:
  RotatingLog(std::filesystem::path path, RotatingLogOptions options) : path_(std::move(path)), options_(options) {}
  Failure rotate();
  Failure append(std::string_view data);

  std::filesystem::path path_;
  RotatingLogOptions options_;
  int fd_ = -1;
  uint64_t size_ = 0, base_ = 0, dropped_ = 0, rotations_ = 0;
  bool failing_ = false;
};

// `path.i` (i >= 1): the i-th newest rotated file.
std::filesystem::path rotated_path(const std::filesystem::path& path, unsigned i);

// The first line of a file started by a rotation (ends with '\n'):
//   [muster] log rotated: this file starts at byte 201326592 of the log;
//   134217728 bytes dropped (cap 67108864 bytes, 1 rotated file kept: output.log.1)
// (one line).
std::string rotation_marker(uint64_t base_offset, uint64_t dropped, const std::filesystem::path& path,
                            const RotatingLogOptions& options);

struct RotationMarker {
  uint64_t base_offset = 0;
  uint64_t dropped = 0;
  size_t length = 0;  // bytes of the marker line, its '\n' included
};
// Reads a marker from the start of `text` (a file's first bytes); nullopt
// when `text` does not start with one.
std::optional<RotationMarker> parse_rotation_marker(std::string_view text);

// What a reader needs to know of a log: the current file's size, the
// absolute offset of its first byte, the bytes dropped before it, its own
// marker line's length (0: none), and the rotated files that exist, newest
// first. A missing file is {0, 0, 0, 0, {}}.
struct LogFileInfo {
  uint64_t size = 0;
  uint64_t base_offset = 0;
  uint64_t dropped = 0;
  size_t marker_length = 0;
  std::vector<std::filesystem::path> rotated;
};
LogFileInfo describe_log(const std::filesystem::path& path);

}  // namespace muster::base
