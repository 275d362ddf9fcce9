// A pod's followed log (`log?follow=true&timestamps=true`) as the bytes of
// the worker's log: every line comes as "<RFC3339Nano time> <text>"; the
// time is stripped, remembered, and lines at or before `resume_after` (the
// last one a previous follow wrote) are dropped, so a follow that resumes
// with sinceTime (whole seconds) writes nothing twice.
//
// The resume point survives the daemon in a file of its own (CursorFile,
// <state>/kubernetes/logs/<worker>.since), rewritten after every chunk
// written to the log, so a daemon killed at any moment resumes after the
// last line its log file holds: it repeats at most the lines of the one
// chunk it was writing, and loses none.
#pragma once

#include <filesystem>
#include <string>
#include <string_view>

namespace muster::workers::kubernetes {

struct LogCursor {
  std::string resume_after;  // normalized time of the last line written ("" = none)
  std::string last;          // normalized time of the last line seen
  std::string partial;       // a line not ended yet
};

// "2021-03-04T05:06:07.5Z" -> "2021-03-04T05:06:07.500000000Z" (comparable
// as text); "" when it is not such a time.
std::string normalize_log_time(std::string_view t);

// The text to write for `chunk` (time stamps removed, repeats dropped).
std::string take_log_lines(LogCursor& cursor, std::string_view chunk);

// The sinceTime for a resume: the normalized time cut to whole seconds
// ("2021-03-04T05:06:07Z").
std::string since_time(const std::string& normalized);

// The kept resume point: the file opened once, and keep() rewrites it in
// place (a normalized time is 30 bytes: one pwrite, no window in which the
// file is empty). Move-only; a file that cannot be opened keeps nothing
// (the log then resumes from the daemon's last start) and says so once.
class CursorFile {
 public:
  explicit CursorFile(std::filesystem::path path);
  ~CursorFile();
  CursorFile(CursorFile&& other) noexcept;
  CursorFile& operator=(CursorFile&& other) noexcept;
  CursorFile(const CursorFile&) = delete;
  CursorFile& operator=(const CursorFile&) = delete;

  // Writes `normalized` (a normalize_log_time() value) unless it is what
  // the file holds already; "" keeps nothing.
  void keep(const std::string& normalized);

 private:
  std::filesystem::path path_;
  int fd_ = -1;
  std::string kept_;
};

}  // namespace muster::workers::kubernetes
