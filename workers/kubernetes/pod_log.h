// A pod's followed log (`log?follow=true&timestamps=true`) as the bytes of
// the worker's log: every line comes as "<RFC3339Nano time> <text>"; the
// time is stripped, remembered, and lines at or before `resume_after` (the
// last one a previous follow wrote) are dropped, so a follow that resumes
// with sinceTime (whole seconds) writes nothing twice.
#pragma once

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

}  // namespace muster::workers::kubernetes
