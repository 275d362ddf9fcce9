// failure_report.h: a failed rank's exception line and record read from its
// lines, which failures read as a peer's, and the root cause among them.
#include "service/failure_report.h"

#include <gtest/gtest.h>

namespace muster::service {
namespace {

using Lines = std::vector<std::string>;

TEST(LastExceptionLine, TakesTheTracebacksLastLine) {
  const Lines lines = {"epoch 1", "Traceback (most recent call last):", "  File \"train.py\", line 3, in <module>",
                       "    cfg = load()", "KeyError: 'config'", "bye"};
  EXPECT_EQ(last_exception_line(lines), "KeyError: 'config'");
}

TEST(LastExceptionLine, ChainedTracebacksEndInTheLastOne) {
  const Lines lines = {"Traceback (most recent call last):", "  File \"a.py\", line 1", "ValueError: first", "",
                       "During handling of the above exception, another exception occurred:", "",
                       "Traceback (most recent call last):", "  File \"a.py\", line 2",
                       "muster.runtime_errors.CommError: allreduce #3: rank 2 (pid 7, this host) has exited"};
  EXPECT_EQ(last_exception_line(lines), "muster.runtime_errors.CommError: allreduce #3: rank 2 (pid 7, this host) has exited");
}

TEST(LastExceptionLine, BareExceptionAndCxxWhat) {
  EXPECT_EQ(last_exception_line({"Traceback (most recent call last):", "  File \"x\"", "KeyboardInterrupt"}),
            "KeyboardInterrupt");
  EXPECT_EQ(last_exception_line({"terminate called after throwing an instance of 'std::runtime_error'",
                                 "  what():  bad shape"}),
            "bad shape");
  EXPECT_EQ(last_exception_line({"loss 0.3", "Error: not an exception line outside a traceback"}), "");
  EXPECT_EQ(last_exception_line({}), "");
}

TEST(ConsequenceOf, NamesThePeerWherePhrasesDo) {
  auto c = consequence_of(
      "muster.torch.engine.EngineStopped: muster.torch was shut down on rank 1; collectives need every rank");
  EXPECT_TRUE(c.is);
  EXPECT_EQ(c.rank, 1);
  c = consequence_of("CommError: allreduce #5: rank 3 (pid 812, this host) has exited; its last op was #4");
  EXPECT_TRUE(c.is);
  EXPECT_EQ(c.rank, 3);
  c = consequence_of("RuntimeError: muster backend: allreduce #2: rank 0 failed (reported by rank 2)");
  EXPECT_TRUE(c.is);
  EXPECT_EQ(c.rank, 0);
  c = consequence_of("RuntimeError: [/gloo/transport/tcp/pair.cc:598] Connection closed by peer [127.0.0.1]:5012");
  EXPECT_TRUE(c.is);
  EXPECT_FALSE(c.rank);
  EXPECT_FALSE(consequence_of("KeyError: 'config'").is);
  EXPECT_FALSE(consequence_of("ValueError: rank 2 of the batch is bad").is);
}

TEST(ReadRankReport, TheRecordComesFirst) {
  const Lines lines = {"Traceback (most recent call last):", "  File \"x\"", "SystemError: later text",
                       "muster-failure {\"rank\": 1, \"exception\": \"KeyError: 'x'\", \"blames\": null, "
                       "\"monotonic_ns\": 5, \"unix_ns\": 100}"};
  const RankReport r = read_rank_report(1, lines);
  EXPECT_EQ(r.exception, "KeyError: 'x'");
  EXPECT_FALSE(r.consequence);
  EXPECT_EQ(r.unix_ns, 100);
  const RankReport blaming = read_rank_report(
      0, {"muster-failure {\"rank\": 0, \"exception\": \"CommError: lost\", \"blames\": 1, \"unix_ns\": 90}"});
  EXPECT_TRUE(blaming.consequence);
  EXPECT_EQ(blaming.blames, 1);
}

TEST(ReadRankReport, ItsOwnShutdownIsNoPeersFault) {
  const RankReport r = read_rank_report(2, {"Traceback (most recent call last):",
                                            "EngineStopped: muster.torch was shut down on rank 2; ..."});
  EXPECT_FALSE(r.blames);
  EXPECT_TRUE(r.consequence);  // still no failure of its own code
}

RankReport own(int rank, std::string exception, std::optional<int64_t> t = std::nullopt) {
  RankReport r;
  r.rank = rank;
  r.exception = std::move(exception);
  r.unix_ns = t;
  return r;
}

RankReport victim(int rank, std::optional<int> blames) {
  RankReport r;
  r.rank = rank;
  r.exception = "EngineStopped: ...";
  r.consequence = true;
  r.blames = blames;
  return r;
}

TEST(RootCause, TheRankThatRaisedNotTheOneThatEndedFirst) {
  const std::vector<RankReport> failed = {victim(0, 1), own(1, "KeyError: 'x'")};
  EXPECT_EQ(root_cause(failed).index, 1u);
  EXPECT_EQ(then_failed_text(failed, 1), "rank 0 (EngineStopped: ...)");
}

TEST(RootCause, EarliestRaiseByTheRecordsClocks) {
  EXPECT_EQ(root_cause({own(0, "A: a", 200), own(1, "B: b", 100)}).index, 1u);
  EXPECT_EQ(root_cause({own(0, "A: a"), own(1, "B: b", 100)}).index, 0u);  // no clock to compare: the order
}

TEST(RootCause, ABlamedRankWithoutATracebackBeforeOneKilledAfterIt) {
  RankReport killed;
  killed.rank = 2;  // SIGTERM from mpirun's abort, listed first
  RankReport exited;
  exited.rank = 1;  // SystemExit("..."): code 1, no traceback
  EXPECT_EQ(root_cause({killed, victim(0, 1), exited}).index, 2u);
  EXPECT_EQ(root_cause({killed, victim(0, std::nullopt)}).index, 0u);
}

TEST(RootCause, EveryOneAVictimOfARankNotAmongThem) {
  const RootCause r = root_cause({victim(0, 2), victim(1, 2)});
  EXPECT_EQ(r.index, 0u);
  EXPECT_EQ(r.elsewhere, 2);
  EXPECT_FALSE(root_cause({victim(0, std::nullopt)}).elsewhere);
}

}  // namespace
}  // namespace muster::service
