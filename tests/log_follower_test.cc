// LogFollower against a fake Stream (no HTTP server, no sleeping): bytes
// appended to a file reach the stream on the next pass, a finished log ends
// the stream after its last bytes, closed or failing streams are dropped,
// the follower count is bounded, and offset/tail pick the first byte.
#include "service/log_follower.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>

#include "temp_dir.h"

namespace fs = std::filesystem;
using muster::api::ErrorCode;
using muster::service::follow_start;
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
  void client_gone() { closed_ = true; }

  std::string text;
  int writes = 0;
  bool refuse = false;

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
    f.follow({log_, offset, [this] { return finished_.load(); }, stream, slot.value()});
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

TEST_F(LogFollowerTest, BigLogsGoInBoundedChunks) {
  LogFollowerOptions o = manual();
  o.max_chunk_bytes = 1000;
  LogFollower f(o);
  append(std::string(2500, 'a'));
  auto s = follow(f);
  f.poll_once();
  EXPECT_EQ(s->text.size(), 1000u);
  f.poll_once();
  f.poll_once();
  EXPECT_EQ(s->text.size(), 2500u);
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
  f.follow({log_, 0, [] { return false; }, late, nullptr});
  EXPECT_TRUE(late->closed());
  EXPECT_EQ(f.active(), 0u);
}

TEST_F(LogFollowerTest, FollowStartFromOffsetOrTail) {
  EXPECT_EQ(follow_start(log_, std::nullopt, 3), 0u);  // no file yet
  append("a\nbb\nccc\n");
  EXPECT_EQ(follow_start(log_, std::nullopt, 0), 0u);
  EXPECT_EQ(follow_start(log_, std::nullopt, 1), 5u);   // "ccc\n"
  EXPECT_EQ(follow_start(log_, std::nullopt, 2), 2u);   // "bb\nccc\n"
  EXPECT_EQ(follow_start(log_, std::nullopt, 3), 0u);
  EXPECT_EQ(follow_start(log_, std::nullopt, 10), 0u);
  EXPECT_EQ(follow_start(log_, 4, 1), 4u);             // offset wins
  EXPECT_EQ(follow_start(log_, 1000, 0), 9u);          // clamped to the size
  append("dd");                                        // an unfinished last line counts
  EXPECT_EQ(follow_start(log_, std::nullopt, 1), 9u);
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
}

}  // namespace
