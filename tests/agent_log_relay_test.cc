// The log capture's protocol (api/log_capture.h) and the real relay
// (`muster-agent --log-relay`) under a writer as fast as this machine
// allows: no file ever passes the cap, no more than `keep` rotated files
// ever exist, and what is kept is the end of what was written, in order.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

#include <gtest/gtest.h>

#include "api/base/process.h"
#include "api/base/rotating_log.h"
#include "api/log_capture.h"
#include "temp_dir.h"

namespace muster {
namespace {
namespace fs = std::filesystem;

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string agent() { return std::string(std::getenv("MUSTER_BINARY_DIR")) + "/bin/muster-agent"; }

TEST(LogCapture, EnvironmentRoundTripsAndBadValuesNameTheVariable) {
  std::map<std::string, std::string> env = {{"OTHER", "1"}};
  api::add_log_capture_env(env, {"/s/workers/w1/output.log", {1 << 20, 3}});
  auto parsed = api::parse_log_capture_env(env);
  ASSERT_TRUE(parsed.is_ok()) << parsed.status().message();
  ASSERT_TRUE(parsed.value());
  EXPECT_EQ(parsed.value()->path, "/s/workers/w1/output.log");
  EXPECT_EQ(parsed.value()->options.max_bytes, 1u << 20);
  EXPECT_EQ(parsed.value()->options.keep, 3u);
  api::remove_log_capture_env(env);
  EXPECT_EQ(env.size(), 1u);
  EXPECT_FALSE(api::parse_log_capture_env(env).value().has_value());

  auto field_of = [](std::map<std::string, std::string> e) {
    auto r = api::parse_log_capture_env(e);
    return r.is_ok() ? std::string("ok") : r.status().field();
  };
  EXPECT_EQ(field_of({{"MUSTER_LOG_FILE", "relative.log"}}), "MUSTER_LOG_FILE");
  EXPECT_EQ(field_of({{"MUSTER_LOG_FILE", "/a.log"}, {"MUSTER_LOG_MAX_BYTES", "12abc"}}), "MUSTER_LOG_MAX_BYTES");
  EXPECT_EQ(field_of({{"MUSTER_LOG_FILE", "/a.log"}, {"MUSTER_LOG_MAX_BYTES", "100"}}), "MUSTER_LOG_MAX_BYTES");
  EXPECT_EQ(field_of({{"MUSTER_LOG_FILE", "/a.log"}, {"MUSTER_LOG_KEEP", "-1"}}), "MUSTER_LOG_KEEP");
  EXPECT_EQ(field_of({{"MUSTER_LOG_FILE", "/a.log"}, {"MUSTER_LOG_KEEP", "101"}}), "MUSTER_LOG_KEEP");
  EXPECT_EQ(field_of({{"MUSTER_LOG_FILE", "/a.log"}}), "ok");  // the defaults
}

TEST(LogCapture, RelayCommandLineRoundTrips) {
  const api::LogCapture c{"/s/clusters/c1/launcher.log", {65536, 0}};
  const auto argv = api::to_log_relay_argv("/opt/muster-agent", c);
  EXPECT_EQ(argv.front(), "/opt/muster-agent");
  auto back = api::parse_log_relay_argv(argv);
  ASSERT_TRUE(back.is_ok());
  ASSERT_TRUE(back.value());
  EXPECT_EQ(back.value()->path, c.path);
  EXPECT_EQ(back.value()->options.max_bytes, 65536u);
  EXPECT_EQ(back.value()->options.keep, 0u);
  EXPECT_FALSE(api::parse_log_relay_argv({"muster-agent", "--kernel", "bash"}).value().has_value());
  auto bad = api::parse_log_relay_argv({"a", "--log-relay", "/x", "--max-bytes", "1k", "--keep", "1"});
  ASSERT_FALSE(bad.is_ok());
  EXPECT_EQ(bad.status().field(), "--max-bytes");
}

std::string line_of(uint64_t i) {
  char buf[80];
  std::snprintf(buf, sizeof buf, "%012llu the quick brown fox jumps over the lazy dog\n",
                static_cast<unsigned long long>(i));
  return buf;
}

TEST(LogRelay, TheCapHoldsAgainstAFastWriter) {
  testing::TempDir tmp("muster-relay");
  const fs::path log = tmp.path() / "output.log";
  const base::RotatingLogOptions limits{1 << 20, 2};
  int fds[2];
  ASSERT_EQ(::pipe2(fds, O_CLOEXEC), 0);
  base::SpawnOptions o;
  o.argv = api::to_log_relay_argv(agent(), {log.string(), limits});
  o.input_fd = fds[0];
  o.new_session = true;
  auto relay = base::spawn(o);
  ASSERT_FALSE(relay.failure) << *relay.failure;
  ::close(fds[0]);

  // Sample the files while the writer runs: the cap and the number of files
  // hold at every moment, not only at the end.
  std::atomic<bool> writing{true};
  std::atomic<uint64_t> largest{0}, samples{0};
  std::atomic<bool> too_many_files{false};
  std::thread sampler([&] {
    while (writing) {
      for (unsigned i = 0; i <= limits.keep + 1; ++i) {
        const fs::path p = i == 0 ? log : base::rotated_path(log, i);
        struct stat st {};
        if (::stat(p.c_str(), &st) != 0) continue;
        if (i > limits.keep) too_many_files = true;
        uint64_t size = static_cast<uint64_t>(st.st_size);
        uint64_t seen = largest.load();
        while (size > seen && !largest.compare_exchange_weak(seen, size)) {
        }
      }
      ++samples;
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  });

  const uint64_t kTotal = 512ull << 20;
  const auto start = std::chrono::steady_clock::now();
  uint64_t written = 0, next = 0;
  std::string block;
  while (written < kTotal) {
    block.clear();
    while (block.size() < (1u << 20)) block += line_of(next++);
    const char* p = block.data();
    size_t left = block.size();
    while (left > 0) {
      const ssize_t n = ::write(fds[1], p, left);
      ASSERT_GT(n, 0);
      p += n;
      left -= static_cast<size_t>(n);
    }
    written += block.size();
  }
  ::close(fds[1]);
  EXPECT_EQ(base::wait_exit(relay.id.pid), 0);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  writing = false;
  sampler.join();
  std::printf("relay: %.0f MB in %.2f s (%.0f MB/s), %llu samples of the files\n", written / 1e6, seconds,
              written / 1e6 / seconds, static_cast<unsigned long long>(samples.load()));

  EXPECT_LE(largest.load(), limits.max_bytes);
  EXPECT_FALSE(too_many_files) << "more than " << limits.keep << " rotated files existed at one time";
  EXPECT_FALSE(fs::exists(base::rotated_path(log, limits.keep + 1)));
  // The kept files are the end of the output: whole lines, in order, the
  // last one last, and the offsets say how much came before.
  std::string kept;
  for (unsigned i = limits.keep; i >= 1; --i) {
    const std::string text = slurp(base::rotated_path(log, i));
    auto m = base::parse_rotation_marker(text);
    ASSERT_TRUE(m);
    kept += text.substr(m->length);
  }
  const std::string current = slurp(log);
  auto m = base::parse_rotation_marker(current);
  ASSERT_TRUE(m);
  kept += current.substr(m->length);
  ASSERT_FALSE(kept.empty());
  const uint64_t first = std::stoull(kept.substr(0, 12));
  std::string expected;
  for (uint64_t i = first; i < next; ++i) expected += line_of(i);
  EXPECT_TRUE(kept == expected) << "the kept output is not the end of what was written";
  const base::LogFileInfo info = base::describe_log(log);
  EXPECT_GT(info.dropped, kTotal - 4 * limits.max_bytes);
  EXPECT_EQ(info.rotated.size(), limits.keep);
}

}  // namespace
}  // namespace muster
