// Hostfile writer/reader and the -H host list.
#include "clusterspec/hostfile.h"

#include <gtest/gtest.h>

#include "clusterspec/spec_error.h"

namespace muster::clusterspec {
namespace {

std::string parse_error(const std::string& text) {
  try {
    parse_hostfile(text);
  } catch (const SpecError& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(HostfileTest, WritesOneLinePerHost) {
  std::vector<HostSlots> hosts = {{"10.0.0.5", 2}, {"node-b", 1}};
  EXPECT_EQ(write_hostfile(hosts), "10.0.0.5 slots=2\nnode-b slots=1\n");
  EXPECT_EQ(hosts_arg(hosts), "10.0.0.5:2,node-b:1");
  EXPECT_EQ(total_slots(hosts), 3);
}

TEST(HostfileTest, RoundTripsForOneToManyHosts) {
  for (int n = 1; n <= 70; n += 23) {
    std::vector<HostSlots> hosts;
    for (int i = 0; i < n; ++i) hosts.push_back({"10.1." + std::to_string(i / 250) + "." + std::to_string(i % 250), 1 + i % 4});
    EXPECT_EQ(parse_hostfile(write_hostfile(hosts)), hosts) << n;
  }
}

TEST(HostfileTest, ToleratesCommentsBlankLinesAndSpacing) {
  const std::string text =
      "# workers of cluster c-1\n"
      "\n"
      "   a   slots=2   # first\n"
      "b\n"
      "\tc slots=3 max_slots=4\r\n"
      "   \n"
      "d max-slots=2 slots=1";
  EXPECT_EQ(parse_hostfile(text), (std::vector<HostSlots>{{"a", 2}, {"b", 1}, {"c", 3}, {"d", 1}}));
  EXPECT_TRUE(parse_hostfile("").empty());
  EXPECT_TRUE(parse_hostfile("# only a comment\n\n").empty());
}

TEST(HostfileTest, ErrorsNameTheLine) {
  EXPECT_EQ(parse_error("a\n\nb slots=x\n"), "hostfile line 3: slots must be an integer in 1..4096, got \"x\"");
  EXPECT_EQ(parse_error("a slots=0"), "hostfile line 1: slots must be an integer in 1..4096, got \"0\"");
  EXPECT_EQ(parse_error("a slots=-1"), "hostfile line 1: slots must be an integer in 1..4096, got \"-1\"");
  EXPECT_EQ(parse_error("a slots=1 slots=2"), "hostfile line 1: slots given twice");
  EXPECT_EQ(parse_error("a\na"), "hostfile line 2: host a is listed twice");
  EXPECT_EQ(parse_error("a foo"), "hostfile line 1: unexpected \"foo\" (expected slots=N or max_slots=N)");
  EXPECT_EQ(parse_error("a cpus=2"), "hostfile line 1: unexpected \"cpus=2\" (expected slots=N or max_slots=N)");
  EXPECT_EQ(parse_error("ok\n$(reboot) slots=1"), "hostfile line 2: host \"$(reboot)\" must match ^[A-Za-z0-9._-]+$ and not start with '-' or '.'");
  EXPECT_NE(parse_error(std::string("a\0", 2)).find("NUL"), std::string::npos);
}

TEST(HostfileTest, WriterRejectsBadHosts) {
  EXPECT_THROW(write_hostfile({}), SpecError);
  EXPECT_THROW(write_hostfile({{"a b", 1}}), SpecError);
  EXPECT_THROW(write_hostfile({{"a\nb slots=99", 1}}), SpecError);
  EXPECT_THROW(write_hostfile({{"a", 0}}), SpecError);
  EXPECT_THROW(write_hostfile({{"a", kMaxSlots + 1}}), SpecError);
  EXPECT_THROW(hosts_arg({{"a", 1}, {"a", 1}}), SpecError);
  auto error = hosts_error({{"ok", 1}, {"-H", 1}});
  ASSERT_TRUE(error.has_value());
  EXPECT_EQ(*error, "hosts[1]: host \"-H\" must match ^[A-Za-z0-9._-]+$ and not start with '-' or '.'");
}

}  // namespace
}  // namespace muster::clusterspec
