// mpirun's output as musterd reads it (Open MPI 4, --tag-output).
//
// RankLines: mpirun puts "[J,R]<stdout>:" (or <stderr>, <stddiag>) before
// every chunk it reads from rank R and after each newline inside it, so a
// line that reaches it in pieces (python -u writes "rank", " 1", "\n" one by
// one) reads "[1,1]<stdout>:rank[1,1]<stdout>: 1", and the chunks of
// different ranks interleave in the middle of lines. RankLines takes the
// stream however it is split and gives back whole lines: a rank's line once,
// with its tag, when its newline arrives; mpirun's own (untagged) lines as
// they come. The launcher's log is written through it
// (launcher.h, LauncherSpec::tagged_output).
//
//   RankLines lines;
//   std::string out;
//   lines.feed("[1,1]<stdout>:rank[1,0]<stdout>:x\n[1,1]<stdout>: 1\n", out);
//   // out == "[1,0]<stdout>:x\n[1,1]<stdout>:rank 1\n"
//
// first_failed_rank() reads mpirun's report of the first rank that failed
// (it prints one when it aborts a job), and rank_tail() a rank's last lines,
// so a failed cluster can name the rank and show why (mpi_mode.cc).
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace muster::service {

class RankLines {
 public:
  // Appends to `out` every line that `data` completes.
  void feed(std::string_view data, std::string& out);
  // The end of the stream: what is left of each line, newline-terminated.
  void finish(std::string& out);

 private:
  std::string pending_;                        // not parsed yet (a tag may be cut between two feeds)
  std::string current_;                        // the tag the next text belongs to ("" = mpirun's own)
  std::map<std::string, std::string> partial_;  // tag -> its unfinished line
};

// How the first failed rank ended, as mpirun reports it: "Process name:
// [[J,1],R]" with "Exit code: N", or "process rank R with PID P on node H
// exited on signal S (Name)".
struct RankExit {
  int rank = 0;
  std::optional<int> exit_code;
  std::optional<int> signal;
  std::string signal_name;  // "Killed", as mpirun names it; "" when unknown
};

// nullopt when `log` holds no such report (mpirun failed before any rank ran).
// mpirun leaves its report out when its job ends in an order it does not
// expect (seen under load); then the ranks' own reports decide
// (first_reported_exit()).
std::optional<RankExit> first_failed_rank(std::string_view log);

// A launched rank's report of its own exit, on its stderr (kRankExitWrapper,
// mpi_mode.h): "muster: rank R exited with code N" or "muster: rank R
// was killed by signal S". The first one in `log`, as mpirun's tag names the
// rank; nullopt when there is none.
inline constexpr std::string_view kExitReport = "muster: rank ";
std::optional<RankExit> first_reported_exit(std::string_view log);

// Every rank's exit report in `log`, in the order they appear (the order
// the ranks ended, as mpirun forwarded them).
std::vector<RankExit> reported_exits(std::string_view log);

// The last `n` lines rank `rank` wrote to stdout or stderr (tags removed,
// its exit report left out), oldest first.
std::vector<std::string> rank_tail(std::string_view log, int rank, size_t n);

// rank_tail() of every rank that wrote to stdout or stderr, in one pass.
std::map<int, std::vector<std::string>> rank_tails(std::string_view log, size_t n);

}  // namespace muster::service
