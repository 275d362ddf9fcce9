// LogFollower against a fake Stream (no HTTP server, no sleeping): bytes
// appended to a file reach the stream on the next pass, a finished log ends
// the stream after its last bytes, closed or failing streams are dropped,
// the follower count is bounded, a behind follow catches up in large passes
// but waits for a slow client, a rotated file is followed into its
// successor without losing or repeating a byte, and the reader's plan
// (log_reader.h) starts at the end with a marker that says what was cut.
#include "service/log_follower.h"
#include "service/log_reader.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

#include "api/base/rotating_log.h"

#include "temp_dir.h"

namespace fs = std::filesystem;
using muster::api::ErrorCode;
using muster::service::LogQuery;
using muster::service::plan_log_start;
using muster::service::LogFollower;
using muster::service::LogFollowerOptions;

namespace {

class FakeStream final : public muster::service::Stream {
 public:
  bool write(std::string chunk) override {
    if (closed_ || refuse) return false;
    text += chunk;
    ++writes;
    return true;
  }
  void close() override { closed_ = true; }
  bool closed() const override { return closed_; }
  size_t queued_bytes() const override { return queued; }
  void client_gone() { closed_ = true; }

  std::string text;
  int writes = 0;
  bool refuse = false;
  size_t queued = 0;  // what the "client" has not read yet

 private:
  bool closed_ = false;
};

class LogFollowerTest : public ::testing::Test {
 protected:
  void append(const std::string& text) { std::ofstream(log_, std::ios::app | std::ios::binary) << text; }
  std::shared_ptr<FakeStream> follow(LogFollower& f, uint64_t offset = 0) {
    auto stream = std::make_shared<FakeStream>();
    auto slot = f.reserve();
    EXPECT_TRUE(slot.is_ok());
    f.follow({log_, offset, [this] { return finished_.load(); }, stream, slot.value(), std::nullopt});
    return stream;
  }
  LogFollowerOptions manual() {
    LogFollowerOptions o;
    o.start_thread = false;
    return o;
  }

  muster::testing::TempDir tmp_{"muster-follow"};
  fs::path dir_ = tmp_.path();
  fs::path log_ = dir_ / "output.log";
  std::atomic<bool> finished_{false};
};

TEST_F(LogFollowerTest, StreamsGrowthThenEndsAfterTheLastBytes) {
  LogFollower f(manual());
  auto s = follow(f);
  f.poll_once();  // no file yet: nothing, still open
  EXPECT_EQ(s->text, "");
  EXPECT_FALSE(s->closed());
  append("line 1\n");
  f.poll_once();
  EXPECT_EQ(s->text, "line 1\n");
  append("line 2\npartial");
  f.poll_once();
  EXPECT_EQ(s->text, "line 1\nline 2\npartial");
  f.poll_once();  // nothing new: no empty writes
  EXPECT_EQ(s->writes, 2);
  // The worker ends; bytes written just before still arrive, then the end.
  append(" tail\n");
  finished_ = true;
  f.poll_once();
  EXPECT_EQ(s->text, "line 1\nline 2\npartial tail\n");
  EXPECT_FALSE(s->closed());
  f.poll_once();
  EXPECT_TRUE(s->closed());
  EXPECT_EQ(f.active(), 0u);
}

TEST_F(LogFollowerTest, StartsAtTheOffset) {
  append("0123456789");
  LogFollower f(manual());
  auto s = follow(f, 4);
  f.poll_once();
  EXPECT_EQ(s->text, "456789");
}

TEST_F(LogFollowerTest, DropsClosedAndRefusingStreams) {
  append("x\n");
  LogFollower f(manual());
  auto gone = follow(f);
  auto refusing = follow(f);
  auto ok = follow(f);
  gone->client_gone();
  refusing->refuse = true;
  f.poll_once();
  EXPECT_EQ(f.active(), 1u);
  EXPECT_EQ(ok->text, "x\n");
}

TEST_F(LogFollowerTest, BoundsFollowersAndFreesUnusedSlots) {
  LogFollowerOptions o = manual();
  o.max_followers = 2;
  LogFollower f(o);
  auto a = f.reserve();
  auto b = f.reserve();
  ASSERT_TRUE(a.is_ok() && b.is_ok());
  auto c = f.reserve();
  ASSERT_FALSE(c.is_ok());
  EXPECT_EQ(c.status().code(), ErrorCode::kUnavailable);
  a = muster::api::internal_error("dropped");  // the slot goes with it
  EXPECT_TRUE(f.reserve().is_ok());
}

TEST_F(LogFollowerTest, BigLogsGoInBoundedChunksAndCatchUpInLargePasses) {
  LogFollowerOptions o = manual();
  o.max_chunk_bytes = 1000;
  o.max_pass_bytes = 4000;
  LogFollower f(o);
  append(std::string(9500, 'a'));
  auto s = follow(f);
  EXPECT_TRUE(f.poll_once());  // behind: the caller polls again at once
  EXPECT_EQ(s->text.size(), 4000u);
  EXPECT_EQ(s->writes, 4);  // chunks of max_chunk_bytes
  EXPECT_TRUE(f.poll_once());
  EXPECT_FALSE(f.poll_once());  // caught up
  EXPECT_EQ(s->text.size(), 9500u);
}

TEST_F(LogFollowerTest, ASlowClientIsWaitedForNotDropped) {
  LogFollowerOptions o = manual();
  o.max_chunk_bytes = 1000;
  o.max_queued_bytes = 3000;
  LogFollower f(o);
  append(std::string(10000, 'b'));
  auto s = follow(f);
  s->queued = 3000;  // the client has not read what it was sent
  EXPECT_TRUE(f.poll_once());
  EXPECT_EQ(s->text.size(), 0u);
  EXPECT_FALSE(s->closed());
  s->queued = 0;
  EXPECT_FALSE(f.poll_once());
  EXPECT_EQ(s->text.size(), 10000u);
}

TEST_F(LogFollowerTest, FollowsARotatedFileIntoItsSuccessorWithAbsoluteOffsets) {
  std::string error;
  auto log = muster::base::RotatingLog::open(log_, {4096, 1}, &error);
  ASSERT_TRUE(log) << error;
  auto write = [&](int from, int to) {
    std::string text;
    for (int i = from; i < to; ++i) text += "line " + std::to_string(i) + "\n";
    ASSERT_FALSE(log->write(text));
  };
  write(0, 100);
  LogFollower f(manual());
  auto s = follow(f);
  f.poll_once();
  // Two rotations between passes: the follow holds the first file open, so
  // it reads all of it, then what is left of the renamed one... then the
  // current file from its rotation line on.
  write(100, 1000);
  for (int i = 0; i < 5; ++i) f.poll_once();
  write(1000, 1010);
  f.poll_once();
  // Without the rotation lines: numbers strictly increasing (nothing twice,
  // nothing out of order), the first file whole, the end at the end. What
  // rotated away before the follow reached it (keep=1) is missing as a whole.
  std::vector<int> numbers;
  std::istringstream in(s->text);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("[muster] log rotated:", 0) == 0) continue;
    ASSERT_EQ(line.rfind("line ", 0), 0u) << line;
    numbers.push_back(std::stoi(line.substr(5)));
  }
  ASSERT_GE(numbers.size(), 110u);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(numbers[static_cast<size_t>(i)], i);
  for (size_t i = 1; i < numbers.size(); ++i) ASSERT_LT(numbers[i - 1], numbers[i]);
  EXPECT_EQ(numbers.back(), 1009);
  EXPECT_EQ(std::count(numbers.begin(), numbers.end(), 1000), 1);
}

TEST_F(LogFollowerTest, AWholeFileReadEndsAtItsEnd) {
  append("abc\ndef\n");
  LogFollower f(manual());
  auto s = std::make_shared<FakeStream>();
  auto slot = f.reserve();
  f.follow({log_, 0, [] { return false; }, s, slot.value(), uint64_t{8}});
  append("later\n");
  f.poll_once();
  EXPECT_EQ(s->text, "abc\ndef\n");
  EXPECT_TRUE(s->closed());
}

TEST_F(LogFollowerTest, ThreadDeliversWithinAPoll) {
  LogFollowerOptions o;
  o.poll = std::chrono::milliseconds(20);
  LogFollower f(o);
  auto s = follow(f);
  append("live\n");
  finished_ = true;
  for (int i = 0; i < 250 && !s->closed(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_TRUE(s->closed());
  EXPECT_EQ(s->text, "live\n");
}

TEST_F(LogFollowerTest, ShutdownEndsStreamsAndRefusesNewOnes) {
  LogFollower f(manual());
  auto s = follow(f);
  f.shutdown();
  EXPECT_TRUE(s->closed());
  EXPECT_EQ(f.reserve().status().code(), ErrorCode::kUnavailable);
  auto late = std::make_shared<FakeStream>();
  f.follow({log_, 0, [] { return false; }, late, nullptr, std::nullopt});
  EXPECT_TRUE(late->closed());
  EXPECT_EQ(f.active(), 0u);
}

TEST_F(LogFollowerTest, ReadsStartAtTheEndAndSayWhatWasCut) {
  LogQuery q;
  EXPECT_EQ(plan_log_start(log_, q).offset, 0u);  // no file yet
  append("a\nbb\nccc\n");
  auto at = [&](size_t tail) {
    LogQuery t;
    t.tail = tail;
    return plan_log_start(log_, t);
  };
  EXPECT_EQ(at(1).file_pos, 5u);  // "ccc\n"
  EXPECT_EQ(at(2).file_pos, 2u);  // "bb\nccc\n"
  EXPECT_EQ(at(3).file_pos, 0u);
  EXPECT_EQ(at(3).marker, "");    // nothing left out: no marker
  EXPECT_EQ(at(10).file_pos, 0u);
  EXPECT_EQ(at(0).file_pos, 9u);
  const std::string marker = at(1).marker;
  EXPECT_EQ(marker.rfind("[muster] 5 bytes (5 bytes) of earlier output not shown; the last line follows.", 0), 0u)
      << marker;
  EXPECT_NE(marker.find(log_.string()), std::string::npos) << marker;
  EXPECT_NE(marker.find("from_start=true"), std::string::npos) << marker;
  EXPECT_EQ(marker.back(), '\n');
  LogQuery from;
  from.from_start = true;
  EXPECT_EQ(plan_log_start(log_, from).file_pos, 0u);
  LogQuery off;
  off.follow = true;
  off.offset = 1000;
  EXPECT_EQ(plan_log_start(log_, off).file_pos, 9u);  // clamped to the size
  append("dd");                                       // an unfinished last line counts
  EXPECT_EQ(at(1).file_pos, 9u);
}

TEST_F(LogFollowerTest, TheTailIsBoundedInBytesAndStartsAtALine) {
  std::string text;
  for (int i = 0; i < 40000; ++i) text += "a line of about forty bytes, number " + std::to_string(i) + "\n";
  append(text);
  LogQuery q;  // the default: 1000 lines
  auto s = plan_log_start(log_, q);
  EXPECT_EQ(text[s.file_pos - 1], '\n');
  EXPECT_EQ(std::count(text.begin() + static_cast<long>(s.file_pos), text.end(), '\n'), 1000);
  q.tail = 100000;
  s = plan_log_start(log_, q);
  EXPECT_LE(text.size() - s.file_pos, muster::service::kMaxTailBytes);
  EXPECT_EQ(text[s.file_pos - 1], '\n');  // the first whole line within the bound
  EXPECT_NE(s.marker.find("as far as they fit in the last 1.0 MiB"), std::string::npos) << s.marker;
}

TEST_F(LogFollowerTest, ARotatedLogsTailCountsTheRotatedBytes) {
  std::string error;
  auto log = muster::base::RotatingLog::open(log_, {4096, 1}, &error);
  ASSERT_TRUE(log) << error;
  for (int i = 0; i < 1000; ++i) ASSERT_FALSE(log->write("line " + std::to_string(i) + "\n"));
  LogQuery q;
  q.tail = 2;
  auto s = plan_log_start(log_, q);
  EXPECT_EQ(s.offset, log->base_offset() + s.file_pos);
  EXPECT_NE(s.marker.find("(" + std::to_string(s.offset) + " bytes)"), std::string::npos) << s.marker;
  EXPECT_NE(s.marker.find("output.log.1"), std::string::npos) << s.marker;
  EXPECT_NE(s.marker.find("dropped by the size cap"), std::string::npos) << s.marker;
  // The whole tail of the current file: its own rotation line is left out
  // (the marker says more).
  q.tail = 100000;
  s = plan_log_start(log_, q);
  EXPECT_EQ(s.file_pos, muster::base::describe_log(log_).marker_length);
  // A follow asking for bytes that rotated away starts at the file and says so.
  LogQuery old;
  old.follow = true;
  old.offset = 10;
  s = plan_log_start(log_, old);
  EXPECT_EQ(s.file_pos, 0u);
  EXPECT_EQ(s.offset, log->base_offset());
  EXPECT_NE(s.marker.find("are no longer in"), std::string::npos) << s.marker;
}

TEST(LogQuery, OffsetAndFollowAreValidated) {
  muster::service::Request req;
  EXPECT_FALSE(muster::service::parse_offset(req).value().has_value());
  EXPECT_FALSE(muster::service::parse_follow(req).value());
  req.query = {{"offset", "12"}, {"follow", "true"}};
  EXPECT_EQ(*muster::service::parse_offset(req).value(), 12u);
  EXPECT_TRUE(muster::service::parse_follow(req).value());
  for (const char* bad : {"-1", "x", "1.5", ""}) {
    req.query = {{"offset", bad}};
    auto r = muster::service::parse_offset(req);
    ASSERT_FALSE(r.is_ok()) << bad;
    EXPECT_EQ(r.status().field(), "offset");
  }
  req.query = {{"follow", "yes please"}};
  EXPECT_EQ(muster::service::parse_follow(req).status().field(), "follow");
  auto field = [](std::map<std::string, std::string> query) {
    muster::service::Request r;
    r.query = std::move(query);
    auto q = muster::service::parse_log_query(r);
    return q.is_ok() ? std::string("ok") : q.status().field();
  };
  EXPECT_EQ(field({}), "ok");
  EXPECT_EQ(field({{"offset", "3"}}), "offset");  // needs follow
  EXPECT_EQ(field({{"from_start", "true"}, {"tail", "3"}}), "from_start");
  EXPECT_EQ(field({{"from_start", "true"}, {"follow", "true"}, {"offset", "3"}}), "from_start");
  EXPECT_EQ(field({{"from_start", "maybe"}}), "from_start");
  EXPECT_EQ(field({{"tail", "+3"}}), "tail");
  EXPECT_EQ(field({{"from_start", "1"}, {"follow", "true"}}), "ok");
}

}  // namespace
