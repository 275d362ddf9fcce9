// Where a read of a worker's or cluster's log starts, and the marker line
// that says what it leaves out. GET .../logs (with or without follow) and
// the dashboard all start here.
//
// Rules (api/openapi.yaml, the logs routes):
// - By default a read starts at the end: the last `tail` lines (default
//   kDefaultTailLines), never more than kMaxTailBytes (then from the first
//   line that starts within them). tail=0 shows nothing earlier (a follow
//   then shows only new output).
// - from_start=true starts at byte 0 of the current file; offset=N (follow
//   only) at absolute byte N of the log (base::RotatingLog's offsets, which
//   count across rotations).
// - When a default read (no tail given) leaves earlier bytes out, or the
//   byte bound cut a tail=N short, or an offset has rotated away, the
//   answer begins with one marker line, "[muster] ...", saying how many
//   bytes came before, where the whole
//   log is on the daemon's host (with its rotated files and what the cap
//   dropped) and how to read it all. The marker is not part of the log: its
//   length is in X-Log-Marker-Bytes, and X-Log-Offset is the absolute offset
//   of the first log byte after it.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>

#include "api/base/rotating_log.h"
#include "api/status.h"
#include "service/router.h"

namespace muster::service {

inline constexpr size_t kDefaultTailLines = 1000;
inline constexpr uint64_t kMaxTailBytes = 1 << 20;

struct LogQuery {
  size_t tail = kDefaultTailLines;
  bool tail_given = false;
  std::optional<uint64_t> offset;
  bool follow = false;
  bool from_start = false;
};

// tail, offset, follow and from_start of a logs request; 400 naming the
// parameter for a bad value or a bad combination (offset without follow;
// from_start with tail or offset).
api::Result<LogQuery> parse_log_query(const Request& req);

struct LogStart {
  uint64_t file_pos = 0;  // first byte of the current file to send
  uint64_t offset = 0;    // its absolute offset in the log (X-Log-Offset)
  uint64_t file_size = 0; // the current file's size when planned
  std::string marker;     // "" or one line ending in '\n', sent first
};

// Plans a read of `path` by the rules above. A missing file is an empty log.
LogStart plan_log_start(const std::filesystem::path& path, const LogQuery& query);

// The first byte of the last `lines` lines of `path` at or after `floor`,
// looking back at most `max_bytes` from `end` (then the first line start
// within them, or end - max_bytes when no line starts there, and *capped
// is set).
uint64_t tail_position(const std::filesystem::path& path, uint64_t end, size_t lines, uint64_t max_bytes,
                       uint64_t floor = 0, bool* capped = nullptr);

// "12.3 MiB" (bytes below 1 KiB: "512 bytes").
std::string human_bytes(uint64_t bytes);

}  // namespace muster::service
