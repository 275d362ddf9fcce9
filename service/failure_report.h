// What a failed rank's own output says about its failure, and which of a
// cluster's failed ranks failed first (the root cause) rather than of
// another's failure.
//
// A rank tells its failure two ways, both read here from its lines (a
// worker's log, or its lines of mpirun's log):
// - the exception line Python prints last in a traceback
//   ("KeyError: 'config'"), or C++'s "what():" line;
// - the record muster's Python runtime writes on stderr when an exception
//   ends the script (sdk/python/muster/failure_record.py):
//       muster-failure {"rank": 1, "exception": "KeyError: 'config'",
//                       "blames": null, "monotonic_ns": ..., "unix_ns": ...}
//   `blames` is the peer rank the exception itself names as the cause (a
//   CommError's rank, an EngineStopped's shut-down rank), else null. The
//   clocks let two ranks' failures be ordered (unix time across hosts).
//
// Root cause (root_cause()): a rank failed *of* another's failure when its
// exception names a peer (blames), or reads as a peer's failure (a rank that
// exited or shut down, a connection a peer closed: consequence_of()). The
// root is the rank that raised on its own, earliest by its record's clock,
// else in the order the ranks ended; when every failed rank is a
// consequence, the rank they blame. The others "then failed".
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace muster::service {

inline constexpr std::string_view kFailureRecordPrefix = "muster-failure ";

struct RankReport {
  int rank = -1;
  std::string exception;               // "KeyError: 'config'"; "" when none was found
  std::optional<int> blames;           // the peer it names as the cause
  bool consequence = false;            // it failed of a peer's failure
  std::optional<int64_t> unix_ns;      // when it raised (its record)
  std::optional<int64_t> monotonic_ns;

  // "KeyError: 'config'", or "" when neither a record nor a traceback was seen.
  bool has_exception() const { return !exception.empty(); }
};

// `text` as lines, without their newlines.
std::vector<std::string> split_lines(std::string_view text);

// The last exception line of the Python tracebacks (or C++ "what():") in
// `lines`, oldest first; "" when there is none.
std::string last_exception_line(const std::vector<std::string>& lines);

// last_exception_line() of the last `max_bytes` of a log file ("" when it
// cannot be read).
std::string last_exception_in(const std::filesystem::path& log, size_t max_bytes = 64 << 10);

// Whether an exception line is a peer's failure seen from here, and the peer
// rank it names (nullopt when it names none): "muster.torch was shut down on
// rank 1", "rank 2 (pid 77, this host) has exited", "Connection closed by
// peer", ...
struct Consequence {
  bool is = false;
  std::optional<int> rank;
};
Consequence consequence_of(std::string_view exception_line);

// A rank's report from its own lines (record first, traceback otherwise).
RankReport read_rank_report(int rank, const std::vector<std::string>& lines);

// `failed` (not empty) in the order their ranks ended, first ended first.
// `index` is the root cause in `failed`; the rest, in order, then failed.
// When every one failed of a peer's failure and the peer they blame is not
// among them (it has not ended yet, or ended well), `elsewhere` names it and
// `index` is the first that ended.
struct RootCause {
  size_t index = 0;
  std::optional<int> elsewhere;
};
RootCause root_cause(const std::vector<RankReport>& failed);

// One line for the others: "rank 0 (EngineStopped: ... shut down on rank 1)".
std::string then_failed_text(const std::vector<RankReport>& failed, size_t root);

}  // namespace muster::service
