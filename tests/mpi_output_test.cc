// service/cluster/mpi_output.h: mpirun's --tag-output stream back into whole lines,
// and its report of the first rank that failed (texts as Open MPI 4.1 writes
// them).
#include "service/cluster/mpi_output.h"

#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <vector>

namespace {

using muster::service::first_failed_rank;
using muster::service::rank_tail;
using muster::service::RankExit;
using muster::service::RankLines;

std::string assemble(const std::vector<std::string>& pieces) {
  RankLines lines;
  std::string out;
  for (const auto& p : pieces) lines.feed(p, out);
  lines.finish(out);
  return out;
}

// What mpirun wrote for `python3 -u` ranks printing "rank R of 2" (seen on
// this machine): a tag before every chunk, chunks of two ranks interleaved.
const std::string kMangled =
    "[1,1]<stdout>:rank[1,0]<stdout>:rank 0 of 2\n"
    "[1,1]<stdout>: 1[1,1]<stdout>: of 2\n"
    "--------------------------------------------------------------------------\n"
    "[1,0]<stderr>:warn[1,0]<stderr>:ing\n";
const std::string kWhole =
    "[1,0]<stdout>:rank 0 of 2\n"
    "[1,1]<stdout>:rank 1 of 2\n"
    "--------------------------------------------------------------------------\n"
    "[1,0]<stderr>:warning\n";

TEST(RankLines, GivesEachRankItsWholeLinesTaggedOnce) { EXPECT_EQ(assemble({kMangled}), kWhole); }

TEST(RankLines, AnySplitOfTheStreamGivesTheSameLines) {
  for (size_t cut = 0; cut <= kMangled.size(); ++cut) {
    EXPECT_EQ(assemble({kMangled.substr(0, cut), kMangled.substr(cut)}), kWhole) << "cut at " << cut;
  }
  std::vector<std::string> bytes;
  for (char c : kMangled) bytes.emplace_back(1, c);
  EXPECT_EQ(assemble(bytes), kWhole);
}

TEST(RankLines, LinesComeOutWhenTheirNewlineArrives) {
  RankLines lines;
  std::string out;
  lines.feed("[1,0]<stdout>:step 1", out);
  EXPECT_EQ(out, "");
  lines.feed("[1,1]<stdout>:other\n", out);
  EXPECT_EQ(out, "[1,1]<stdout>:other\n");
  lines.feed("[1,0]<stdout>: done\n", out);
  EXPECT_EQ(out, "[1,1]<stdout>:other\n[1,0]<stdout>:step 1 done\n");
}

TEST(RankLines, TextThatOnlyLooksLikeATagStaysText) {
  EXPECT_EQ(assemble({"[1,0]<stdout>:a [b] [1,x] [2,3]<other>: c\n"}), "[1,0]<stdout>:a [b] [1,x] [2,3]<other>: c\n");
  EXPECT_EQ(assemble({"[warn] mpirun's own\n"}), "[warn] mpirun's own\n");
}

TEST(RankLines, FinishEndsEveryPartialLine) {
  EXPECT_EQ(assemble({"[1,0]<stdout>:no newline", "[1,1]<stderr>:cut"}),
            "[1,0]<stdout>:no newline\n[1,1]<stderr>:cut\n");
  EXPECT_EQ(assemble({"[1,0]<std"}), "[1,0]<std\n");  // a tag cut short by the end is text
}

// `e` names rank `rank`, ended with `code` (and by `signal`, named `name`).
void expect_exit(const std::optional<RankExit>& e, int rank, int code, std::optional<int> signal = std::nullopt,
                 const std::string& name = "") {
  ASSERT_TRUE(e);
  EXPECT_EQ(e->rank, rank);
  EXPECT_EQ(e->exit_code, code);
  EXPECT_EQ(e->signal, signal);
  EXPECT_EQ(e->signal_name, name);
}

TEST(FirstFailedRank, ReadsMpirunsExitCodeReport) {
  const std::string log =
      "[1,1]<stderr>:Traceback (most recent call last):\n"
      "--------------------------------------------------------------------------\n"
      "Primary job  terminated normally, but 1 process returned\n"
      "a non-zero exit code. Per user-direction, the job has been aborted.\n"
      "--------------------------------------------------------------------------\n"
      "--------------------------------------------------------------------------\n"
      "mpirun detected that one or more processes exited with non-zero status, thus causing\n"
      "the job to be terminated. The first process to do so was:\n\n"
      "  Process name: [[7052,1],1]\n"
      "  Exit code:    3\n"
      "--------------------------------------------------------------------------\n";
  expect_exit(first_failed_rank(log), 1, 3);
}

TEST(FirstFailedRank, ReadsMpirunsSignalReport) {
  const std::string log =
      "[1,0]<stdout>:rank 0 hello\n"
      "--------------------------------------------------------------------------\n"
      "mpirun noticed that process rank 12 with PID 0 on node vm exited on signal 9 (Killed).\n"
      "--------------------------------------------------------------------------\n";
  expect_exit(first_failed_rank(log), 12, 137, 9, "Killed");
}

TEST(FirstFailedRank, NothingWithoutAReport) {
  EXPECT_FALSE(first_failed_rank("[1,0]<stdout>:process rank 3 is fine\nmpirun: command not found\n"));
  EXPECT_FALSE(first_failed_rank(""));
}

// Under load mpirun sometimes prints only its first notice (seen with Open
// MPI 4.1.4: the job's state moved on before its report); the ranks' own
// reports, from kRankExitWrapper, still name the first one that failed.
TEST(FirstFailedRank, TheRanksOwnReportWhenMpirunLeftItsOut) {
  const std::string log =
      "[1,0]<stdout>:rank 0 up\n"
      "[1,1]<stdout>:rank 1 up\n"
      "[1,1]<stderr>:bad batch on rank 1\n"
      "[1,1]<stderr>:muster: rank 1 exited with code 3\n"
      "--------------------------------------------------------------------------\n"
      "Primary job  terminated normally, but 1 process returned\n"
      "a non-zero exit code. Per user-direction, the job has been aborted.\n"
      "--------------------------------------------------------------------------\n"
      "[1,0]<stderr>:muster: rank 0 was killed by signal 15\n";
  expect_exit(first_failed_rank(log), 1, 3);
  EXPECT_EQ(rank_tail(log, 1, 5), (std::vector<std::string>{"rank 1 up", "bad batch on rank 1"}));
}

TEST(FirstFailedRank, TheRanksOwnSignalReport) {
  expect_exit(first_failed_rank("[1,12]<stderr>:muster: rank 12 was killed by signal 9\n"
                                "[1,0]<stderr>:muster: rank 0 was killed by signal 15\n"),
              12, 137, 9, "Killed");
}

TEST(FirstFailedRank, MpirunsReportComesFirst) {
  // mpirun names rank 2; an earlier-looking report of rank 0 (its lines may
  // reach the log in another order) does not override it.
  expect_exit(first_failed_rank("[1,0]<stderr>:muster: rank 0 exited with code 1\n"
                                "  Process name: [[7052,1],2]\n  Exit code:    4\n"),
              2, 4);
}

TEST(FirstFailedRank, ReportsOutsideARanksLinesAreText) {
  // Untagged (mpirun's), on stdout, or malformed text is not a report.
  EXPECT_FALSE(first_failed_rank("muster: rank 1 exited with code 3\n"));
  EXPECT_FALSE(first_failed_rank("[1,1]<stdout>:muster: rank 1 is slow\n"));
  EXPECT_FALSE(first_failed_rank("[1,1]<stdout>:muster: rank 1 exited with code 3\n"));  // the script's own words
  EXPECT_FALSE(first_failed_rank("[1,1]<stderr>:muster: rank 1 was killed by signal 0\n"));
}

TEST(RankTail, TheRanksOwnLastLinesWithoutTags) {
  std::string log;
  for (int i = 0; i < 30; ++i) {
    log += "[1,0]<stdout>:zero " + std::to_string(i) + "\n";
    log += "[1,1]<stdout>:one " + std::to_string(i) + "\n";
  }
  log += "[1,1]<stderr>:ValueError: bad\n[1,11]<stdout>:eleven\nmpirun's own line\n";
  auto tail = rank_tail(log, 1, 3);
  EXPECT_EQ(tail, (std::vector<std::string>{"one 28", "one 29", "ValueError: bad"}));
  EXPECT_EQ(rank_tail(log, 11, 5), (std::vector<std::string>{"eleven"}));
  EXPECT_TRUE(rank_tail(log, 7, 5).empty());
}

}  // namespace
