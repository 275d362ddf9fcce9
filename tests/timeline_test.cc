// Chrome-trace timeline writer (runtime/distributed/timeline.h).
#include "runtime/distributed/timeline.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "runtime/error.h"
#include "temp_dir.h"

namespace muster::runtime::distributed {
namespace {

namespace fs = std::filesystem;

class TimelineTest : public ::testing::Test {
 protected:

  nlohmann::json parse(const std::string& path) {
    std::ifstream in(path);
    std::stringstream ss;
    ss << in.rdbuf();
    return nlohmann::json::parse(ss.str());  // throws if not valid JSON
  }

  muster::testing::TempDir tmp_{"muster-timeline"};
  fs::path dir_ = tmp_.path();
};

TEST_F(TimelineTest, EmptyTraceIsValidJson) {
  const std::string path = (dir_ / "t.json").string();
  { Timeline t(path); }
  const auto j = parse(path);
  ASSERT_TRUE(j.contains("traceEvents"));
  EXPECT_TRUE(j["traceEvents"].is_array());
  EXPECT_TRUE(j["traceEvents"].empty());
}

TEST_F(TimelineTest, ValidAfterEveryEventWithoutClose) {
  const std::string path = (dir_ / "t.json").string();
  Timeline t(path);
  t.name_process(3, "rank 3");
  t.name_row(3, 1, "bucket 0");
  for (int i = 0; i < 5; ++i) {
    t.complete({"allreduce", "bucket", 3, 1, 100 + i * 10, 7, {{"step", i}, {"bytes", 4096}}});
    // Read back while the writer is still open, as after a crash.
    const auto j = parse(path);
    const auto& ev = j["traceEvents"];
    ASSERT_EQ(ev.size(), 3u + static_cast<std::size_t>(i) + 1) << "after event " << i;
    const auto& last = ev.back();
    EXPECT_EQ(last["ph"], "X");
    EXPECT_EQ(last["name"], "allreduce");
    EXPECT_EQ(last["cat"], "bucket");
    EXPECT_EQ(last["pid"], 3);
    EXPECT_EQ(last["tid"], 1);
    EXPECT_EQ(last["ts"], 100 + i * 10);
    EXPECT_EQ(last["dur"], 7);
    EXPECT_EQ(last["args"]["step"], i);
    EXPECT_EQ(last["args"]["bytes"], 4096);
  }
  const auto j = parse(path);
  EXPECT_EQ(j["traceEvents"][0]["ph"], "M");
  EXPECT_EQ(j["traceEvents"][0]["name"], "process_name");
  EXPECT_EQ(j["traceEvents"][0]["args"]["name"], "rank 3");
  EXPECT_EQ(j["traceEvents"][1]["name"], "thread_name");
  EXPECT_EQ(j["traceEvents"][1]["tid"], 1);
}

TEST_F(TimelineTest, EventsAfterCloseAreDropped) {
  const std::string path = (dir_ / "t.json").string();
  Timeline t(path);
  t.complete({"pack", "bucket", 0, 1, 0, 1, {}});
  t.close();
  t.complete({"pack", "bucket", 0, 1, 5, 1, {}});
  EXPECT_EQ(parse(path)["traceEvents"].size(), 1u);
}

TEST_F(TimelineTest, OpenSharesOneWriterPerPath) {
  const std::string path = (dir_ / "t.json").string();
  auto a = Timeline::open(path);
  auto b = Timeline::open(path);
  EXPECT_EQ(a, b) << "a second optimizer must not truncate the first one's trace";
  EXPECT_EQ(a->next_pid(), 0);
  EXPECT_EQ(b->next_pid(), 1);
  a->complete({"pack", "bucket", 0, 1, 0, 1, {}});
  b->complete({"pack", "bucket", 1, 1, 0, 1, {}});
  EXPECT_EQ(parse(path)["traceEvents"].size(), 2u);
  a.reset();
  b.reset();
  auto c = Timeline::open(path);  // all released: a new trace
  EXPECT_EQ(parse(path)["traceEvents"].size(), 0u);
}

TEST_F(TimelineTest, UnwritablePathThrowsNamingIt) {
  try {
    Timeline t((dir_ / "no/such/dir/t.json").string());
    FAIL() << "expected an Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no/such/dir"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace muster::runtime::distributed
