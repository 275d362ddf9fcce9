// Streamed responses (router.h, Stream) over real sockets: the status and
// headers come first, then `body` and every written chunk in order; the
// producer's stream closes when the client leaves or reads too slowly
// (never unbounded buffering), and writes from many threads are safe.
#include <gtest/gtest.h>

#include <thread>

#include "http_test_server.h"
#include "raw_http_client.h"

using namespace muster;
using namespace std::chrono_literals;
using muster::testing::http_get;
using muster::testing::RawHttpClient;
using muster::testing::TestServer;

namespace {

bool eventually(const std::function<bool()>& f, std::chrono::milliseconds timeout = 3s) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (f()) return true;
    std::this_thread::sleep_for(10ms);
  }
  return f();
}

TEST(HttpServerStream, ChunksArriveInOrderThenTheEnd) {
  TestServer s;
  RawHttpClient c(s.port());
  c.send(http_get("/api/v1/stream", "T0KEN"));
  ASSERT_TRUE(s.wait_streams(1));
  auto stream = s.stream(0);
  // The headers and the first chunk come before anything is written.
  ASSERT_TRUE(c.read_until("first;"));
  std::string expected = "first;";
  for (int i = 0; i < 200; ++i) {
    const std::string chunk = "line " + std::to_string(i) + "\n";
    expected += chunk;
    ASSERT_TRUE(stream->write(chunk));
  }
  stream->close();
  EXPECT_TRUE(stream->closed());
  EXPECT_FALSE(stream->write("after close"));
  // read_response restarts from the buffered bytes.
  RawHttpClient again(s.port());
  again.send(http_get("/api/v1/stream", "T0KEN"));
  ASSERT_TRUE(s.wait_streams(2));
  auto second = s.stream(1);
  std::vector<std::thread> writers;
  for (int t = 0; t < 4; ++t) {
    writers.emplace_back([&, t] {
      for (int i = 0; i < 100; ++i) second->write(std::to_string(t) + ":" + std::to_string(i) + "\n");
    });
  }
  for (auto& w : writers) w.join();
  second->close();
  auto r = again.read_response();
  ASSERT_EQ(r.status, 200);
  EXPECT_EQ(r.headers["transfer-encoding"], "chunked");
  EXPECT_EQ(r.headers["content-type"], "text/plain");
  // Each writer's lines arrive in its own order.
  for (int t = 0; t < 4; ++t) {
    size_t pos = 0;
    for (int i = 0; i < 100; ++i) {
      pos = r.body.find(std::to_string(t) + ":" + std::to_string(i) + "\n", pos);
      ASSERT_NE(pos, std::string::npos) << "writer " << t << " line " << i;
    }
  }
  EXPECT_EQ(r.body.rfind("first;", 0), 0u);
  EXPECT_TRUE(again.closed_within(2s));
}

TEST(HttpServerStream, FirstStreamBodyIsComplete) {
  TestServer s;
  RawHttpClient c(s.port());
  c.send(http_get("/api/v1/stream", "T0KEN"));
  ASSERT_TRUE(s.wait_streams(1));
  auto stream = s.stream(0);
  std::string expected = "first;";
  for (int i = 0; i < 50; ++i) {
    expected += std::string(1000, static_cast<char>('a' + i % 26));
    stream->write(std::string(1000, static_cast<char>('a' + i % 26)));
  }
  stream->close();
  auto r = c.read_response();
  ASSERT_EQ(r.status, 200);
  EXPECT_EQ(r.body, expected);
}

TEST(HttpServerStream, ClientLeavingClosesTheStream) {
  TestServer s;
  RawHttpClient c(s.port());
  c.send(http_get("/api/v1/stream", "T0KEN"));
  ASSERT_TRUE(s.wait_streams(1));
  auto stream = s.stream(0);
  ASSERT_TRUE(c.read_until("first;"));
  EXPECT_FALSE(stream->closed());
  c.close();
  EXPECT_TRUE(eventually([&] { return stream->closed(); }));
  EXPECT_FALSE(stream->write("nobody reads this"));
  EXPECT_TRUE(eventually([&] { return s.server().connection_count() == 0; }));
}

TEST(HttpServerStream, SlowReaderIsDroppedNotBuffered) {
  TestServer s;  // 1 MiB queue bound
  RawHttpClient c(s.port());
  c.send(http_get("/api/v1/stream", "T0KEN"));
  ASSERT_TRUE(s.wait_streams(1));
  auto stream = s.stream(0);
  // The client never reads. Writing must start failing long before the
  // producer has handed over 256 MiB.
  const std::string chunk(64 << 10, 'x');
  size_t written = 0;
  while (written < (256u << 20) && stream->write(chunk)) {
    written += chunk.size();
    if (written % (1 << 20) == 0) std::this_thread::sleep_for(1ms);  // let the socket fill
  }
  EXPECT_TRUE(stream->closed());
  EXPECT_LT(written, 64u << 20);
  // The server dropped the connection: what the kernel still holds drains,
  // then EOF.
  EXPECT_TRUE(eventually([&] { return s.server().connection_count() == 0; }));
  EXPECT_TRUE(c.closed_within(5s));
}

}  // namespace
