// service/elastic/host_blacklist.h: failures counted per host, blacklisting
// at the threshold, Horovod's cooldown (lo * 2^n + U(0, lo) within [lo, hi])
// with a chosen draw, for good without a range, and the record's entries.
#include "service/elastic/host_blacklist.h"

#include <gtest/gtest.h>

namespace {

using muster::service::TimePoint;
using muster::service::elastic::HostBlacklist;
using muster::service::elastic::HostBlacklistOptions;
using namespace std::chrono_literals;

const TimePoint kT0 = TimePoint{} + 1000s;

TEST(HostBlacklist, AHostIsBlacklistedAtTheThresholdAndItsCountStartsAgain) {
  HostBlacklist b({2, std::nullopt}, [] { return 0.0; });
  EXPECT_FALSE(b.record_failure("10.0.0.1", kT0));
  EXPECT_FALSE(b.blacklisted("10.0.0.1", kT0));
  EXPECT_FALSE(b.record_failure("10.0.0.2", kT0));  // counts are per host
  EXPECT_TRUE(b.record_failure("10.0.0.1", kT0));
  EXPECT_TRUE(b.blacklisted("10.0.0.1", kT0));
  EXPECT_FALSE(b.blacklisted("10.0.0.2", kT0));
  // Without a cooldown range: for good.
  EXPECT_EQ(b.until("10.0.0.1"), TimePoint::max());
  EXPECT_TRUE(b.blacklisted("10.0.0.1", kT0 + 24h * 365));
  // Already blacklisted: more failures blacklist it no further.
  EXPECT_FALSE(b.record_failure("10.0.0.1", kT0));
  EXPECT_FALSE(b.record_failure("10.0.0.1", kT0));
}

TEST(HostBlacklist, TheCooldownGrowsAsHorovodsWithinTheRange) {
  double draw = 0.5;
  HostBlacklist b({1, std::make_pair(10, 100)}, [&draw] { return draw; });
  // 1st: 10 * 2 + 0.5 * 10 = 25 s.
  ASSERT_TRUE(b.record_failure("h", kT0));
  EXPECT_EQ(b.until("h"), kT0 + 25s);
  EXPECT_TRUE(b.blacklisted("h", kT0 + 24s));
  EXPECT_FALSE(b.blacklisted("h", kT0 + 25s));
  // 2nd, once back: 10 * 4 + 0 = 40 s.
  draw = 0.0;
  ASSERT_TRUE(b.record_failure("h", kT0 + 30s));
  EXPECT_EQ(b.until("h"), kT0 + 30s + 40s);
  // 3rd: 80 + 9.9 = 89.9 s; 4th: 160 + ... clamped to 100 s.
  draw = 0.99;
  ASSERT_TRUE(b.record_failure("h", kT0 + 100s));
  EXPECT_EQ(b.until("h"), kT0 + 100s + std::chrono::duration_cast<TimePoint::duration>(89.9s));
  ASSERT_TRUE(b.record_failure("h", kT0 + 200s));
  EXPECT_EQ(b.until("h"), kT0 + 200s + 100s);
}

TEST(HostBlacklist, EntriesAreTheHostsBlacklistedNowWithTheirCounts) {
  HostBlacklist b({1, std::make_pair(10, 1000)}, [] { return 0.0; });
  ASSERT_TRUE(b.record_failure("a", kT0));        // until kT0 + 20 s
  ASSERT_TRUE(b.record_failure("b", kT0 + 5s));   // until kT0 + 25 s
  auto now = b.entries(kT0 + 21s);
  ASSERT_EQ(now.size(), 1u);
  EXPECT_EQ(now[0].host, "b");
  EXPECT_EQ(now[0].until, kT0 + 25s);
  EXPECT_EQ(now[0].times, 1);
  ASSERT_TRUE(b.record_failure("a", kT0 + 30s));  // its second time: 40 s
  auto later = b.entries(kT0 + 31s);
  ASSERT_EQ(later.size(), 1u);
  EXPECT_EQ(later[0].host, "a");
  EXPECT_EQ(later[0].times, 2);
  EXPECT_TRUE(b.entries(kT0 + 1h).empty());
}

TEST(HostBlacklist, AHostNeverBlacklistedComesBackAtOnce) {
  HostBlacklist b({3, std::nullopt}, [] { return 0.0; });
  EXPECT_FALSE(b.blacklisted("x", kT0));
  EXPECT_EQ(b.until("x"), TimePoint{});
  EXPECT_TRUE(b.entries(kT0).empty());
}

}  // namespace
