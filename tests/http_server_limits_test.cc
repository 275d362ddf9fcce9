// The HTTP server against hostile and heavy clients, over real sockets:
// slow clients are cut off at the read timeout without pinning anything,
// oversized headers and bodies (Content-Length and chunked) are refused
// before they are buffered, unauthenticated requests never have their body
// read, the connection limit holds, and hundreds of idle keep-alive
// clients plus parked requests leave a fresh request answering at once.
#include <gtest/gtest.h>

#include <fcntl.h>

#include <filesystem>
#include <thread>

#include "http_test_server.h"
#include "raw_http_client.h"

using namespace muster;
using namespace std::chrono_literals;
using muster::testing::http_get;
using muster::testing::RawHttpClient;
using muster::testing::TestServer;

namespace {

std::string post(const std::string& path, const std::string& body, const std::string& token = "T0KEN") {
  std::string r = "POST " + path + " HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n";
  if (!token.empty()) r += "Authorization: Bearer " + token + "\r\n";
  return r + "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
}

// A fresh connection's GET /healthz, and how long it took.
std::chrono::milliseconds fresh_request_time(int port, int* status) {
  const auto start = std::chrono::steady_clock::now();
  RawHttpClient c(port);
  c.send(http_get("/healthz"));
  *status = c.read_response(5s).status;
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start);
}

TEST(HttpServerLimits, KeepAliveAndPipelinedRequestsAnswerInOrder) {
  TestServer s;
  RawHttpClient c(s.port());
  // Two requests in one write, then a GET with a body (read and ignored).
  ASSERT_TRUE(c.send(post("/api/v1/echo", "[1]") + post("/api/v1/echo", "[1,2,3]")));
  auto r1 = c.read_response(), r2 = c.read_response();
  EXPECT_EQ(r1.status, 200);
  EXPECT_EQ(nlohmann::json::parse(r1.body)["body"], nlohmann::json::parse("[1]"));
  EXPECT_EQ(nlohmann::json::parse(r2.body)["body"], nlohmann::json::parse("[1,2,3]"));
  ASSERT_TRUE(c.send("GET /healthz HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\n\r\nhello" + http_get("/healthz")));
  EXPECT_EQ(c.read_response().status, 200);
  EXPECT_EQ(c.read_response().status, 200);
  ASSERT_TRUE(c.send(post("/api/v1/echo", "{bad json")));
  EXPECT_EQ(c.read_response().status, 400);
  ASSERT_TRUE(c.send(http_get("/nowhere")));
  EXPECT_EQ(c.read_response().status, 404);
  ASSERT_TRUE(c.send("GARBAGE\r\n\r\n"));
  EXPECT_EQ(c.read_response().status, 400);
}

TEST(HttpServerLimits, SlowClientsAreCutOffAndPinNothing) {
  TestServer s;  // read timeout 600 ms
  std::vector<RawHttpClient> slow;
  for (int i = 0; i < 40; ++i) {
    RawHttpClient c(s.port());
    switch (i % 4) {
      case 0: c.send("GET /healthz HTTP/1.1\r\nHost: t\r\n"); break;             // headers never end
      case 1: c.send("POST /healthz HTTP/1.1\r\nContent-Length: 100\r\n\r\n"); break;  // body never comes
      case 2: c.send(post("/api/v1/echo", "[1,2,3,4]").substr(0, 120)); break;    // half a body
      case 3: c.send("POST /healthz HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nab"); break;
    }
    slow.push_back(std::move(c));
  }
  // A drip-feeder sends a byte every 100 ms: still cut off at the deadline.
  RawHttpClient drip(s.port());
  std::atomic<bool> dripping{true};
  std::thread dripper([&] {
    const std::string req = "GET /healthz HTTP/1.1\r\nX-Long: " + std::string(200, 'a');
    for (size_t i = 0; i < req.size() && dripping; ++i) {
      if (!drip.send(req.substr(i, 1))) break;
      std::this_thread::sleep_for(100ms);
    }
  });
  // Normal requests keep answering meanwhile.
  int status = 0;
  EXPECT_LT(fresh_request_time(s.port(), &status), 1000ms);
  EXPECT_EQ(status, 200);
  for (auto& c : slow) EXPECT_TRUE(c.closed_within(3s));
  EXPECT_TRUE(drip.closed_within(3s));
  dripping = false;
  dripper.join();
  EXPECT_EQ(s.echoed.load(), 0);
  EXPECT_LT(fresh_request_time(s.port(), &status), 1000ms);
  EXPECT_EQ(status, 200);
  for (int i = 0; i < 100 && s.server().connection_count() > 0; ++i) std::this_thread::sleep_for(20ms);
  EXPECT_EQ(s.server().connection_count(), 0u);
}

TEST(HttpServerLimits, OversizedHeadersAre431) {
  TestServer s;  // 4 KiB of headers
  RawHttpClient c(s.port());
  c.send("GET /healthz HTTP/1.1\r\nHost: t\r\nX-Pad: " + std::string(8000, 'x') + "\r\n\r\n");
  auto r = c.read_response();
  EXPECT_EQ(r.status, 431);
  EXPECT_NE(r.body.find("request_header_fields_too_large"), std::string::npos) << r.body;
  EXPECT_TRUE(c.closed_within(2s));
}

TEST(HttpServerLimits, OversizedContentLengthIs413WithoutReadingTheBody) {
  TestServer s;  // 64 KiB bodies
  RawHttpClient c(s.port());
  // Only the headers are sent: the answer must not wait for the body.
  c.send("POST /api/v1/echo HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer T0KEN\r\nContent-Length: 100000000\r\n\r\n");
  auto r = c.read_response(300ms);
  EXPECT_EQ(r.status, 413);
  EXPECT_NE(r.body.find("payload_too_large"), std::string::npos);
  EXPECT_TRUE(c.closed_within(2s));
  EXPECT_EQ(s.echoed.load(), 0);
}

TEST(HttpServerLimits, OversizedChunkedBodyIs413WhileReading) {
  TestServer s;
  // Under the limit, a chunked body reaches the handler whole.
  RawHttpClient ok(s.port());
  ok.send("POST /api/v1/echo HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer T0KEN\r\nTransfer-Encoding: chunked\r\n\r\n"
          "3\r\n[1,\r\n2\r\n2]\r\n0\r\n\r\n");
  auto r = ok.read_response();
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(nlohmann::json::parse(r.body)["body"], nlohmann::json::parse("[1,2]"));

  // Over it: 413 while the client is still sending, never the handler.
  RawHttpClient c(s.port());
  c.send("POST /api/v1/echo HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer T0KEN\r\nTransfer-Encoding: chunked\r\n\r\n");
  const std::string chunk = "1000\r\n" + std::string(4096, ' ') + "\r\n";
  std::atomic<size_t> sent{0};
  std::thread sender([&] {
    while (sent < (64u << 20) && c.send(chunk)) sent += chunk.size();
  });
  auto answer = c.read_response(10s);
  ::shutdown(c.fd(), SHUT_RDWR);  // ends the sender if the server still reads
  sender.join();
  EXPECT_EQ(answer.status, 413);
  // The server stopped reading at the limit: the client could not push
  // more than the limit plus what the two sockets' buffers hold.
  EXPECT_LT(sent, 16u << 20);
  EXPECT_EQ(s.echoed.load(), 1);
}

// A client that sends a refused body whole before it reads (Python's
// http.client does) gets the 413, not a reset: the server reads and discards
// up to max_drain_bytes before it closes (nginx's lingering close). Past
// that bound it stops reading.
TEST(HttpServerLimits, ARefusedBodySentWholeStillGetsItsAnswer) {
  auto o = TestServer::defaults();  // 64 KiB bodies
  o.max_drain_bytes = 16 << 20;
  o.read_timeout = 20s;
  TestServer s(o);
  RawHttpClient c(s.port());
  const std::string body(8 << 20, 'x');
  const bool sent = c.send("POST /api/v1/echo HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer T0KEN\r\nContent-Length: " +
                           std::to_string(body.size()) + "\r\n\r\n" + body);
  EXPECT_TRUE(sent) << "the server closed before the client had sent its 8 MiB";
  const auto r = c.read_response(20s);
  EXPECT_EQ(r.status, 413);
  EXPECT_NE(r.body.find("payload_too_large"), std::string::npos) << r.body;
  EXPECT_EQ(s.echoed.load(), 0);

  auto tight = TestServer::defaults();  // drains 1 MiB
  tight.read_timeout = 20s;
  TestServer t(tight);
  RawHttpClient d(t.port());
  d.send("POST /api/v1/echo HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer T0KEN\r\nContent-Length: 100000000\r\n\r\n");
  const std::string piece(1 << 16, 'x');
  size_t pushed = 0;
  while (pushed < (100u << 20) && d.send(piece)) pushed += piece.size();
  EXPECT_LT(pushed, 16u << 20) << "the server kept reading past its drain bound";
}

TEST(HttpServerLimits, UnauthenticatedBodyIsNeverRead) {
  TestServer s;
  RawHttpClient c(s.port());
  c.send("POST /api/v1/echo HTTP/1.1\r\nHost: t\r\nContent-Length: 60000\r\n\r\n");  // no token, no body
  auto r = c.read_response(300ms);
  EXPECT_EQ(r.status, 401);
  EXPECT_NE(r.body.find("unauthenticated"), std::string::npos);
  EXPECT_TRUE(c.closed_within(2s));
  EXPECT_EQ(s.echoed.load(), 0);
}

TEST(HttpServerLimits, ConnectionLimitRefusesNewOnesAndKeepsOldOnes) {
  auto o = TestServer::defaults();
  o.max_connections = 20;
  o.max_kept_connections = 20;  // all kept: the limit alone is under test here
  TestServer s(o);
  std::vector<RawHttpClient> held;
  for (int i = 0; i < 20; ++i) {
    RawHttpClient c(s.port());
    c.send(http_get("/healthz"));
    ASSERT_EQ(c.read_response().status, 200);
    held.push_back(std::move(c));
  }
  RawHttpClient extra(s.port());  // answered at accept, before it sends
  EXPECT_EQ(extra.read_response().status, 503);
  EXPECT_TRUE(extra.closed_within(2s));
  for (auto& c : held) {
    c.send(http_get("/healthz"));
    EXPECT_EQ(c.read_response().status, 200);
  }
  held.pop_back();  // one leaves: room for one more
  for (int i = 0; i < 100 && s.server().connection_count() >= 20; ++i) std::this_thread::sleep_for(10ms);
  RawHttpClient next(s.port());
  next.send(http_get("/healthz"));
  EXPECT_EQ(next.read_response().status, 200);
}

// Beyond max_kept_connections a response closes its connection, so more
// clients than the daemon can hold open (30,000 agents, 20,000 files) are
// served by reconnecting instead of refused; those kept stay kept.
TEST(HttpServerLimits, PastTheKeptBudgetResponsesCloseTheirConnection) {
  auto o = TestServer::defaults();
  o.max_connections = 30;
  o.max_kept_connections = 10;
  TestServer s(o);
  std::vector<RawHttpClient> kept;
  for (int i = 0; i < 10; ++i) {
    RawHttpClient c(s.port());
    c.send(http_get("/healthz"));
    auto r = c.read_response();
    ASSERT_EQ(r.status, 200);
    EXPECT_EQ(r.headers.count("connection"), 0u) << "connection " << i << " should be kept";
    kept.push_back(std::move(c));
  }
  // Over the budget: answered, then closed by the server.
  for (int i = 0; i < 25; ++i) {
    RawHttpClient c(s.port());
    c.send(http_get("/healthz"));
    auto r = c.read_response();
    ASSERT_EQ(r.status, 200) << "request " << i;
    EXPECT_EQ(r.headers["connection"], "close");
    EXPECT_TRUE(c.closed_within(2s));
  }
  // The kept ones still serve request after request.
  for (auto& c : kept) {
    c.send(http_get("/healthz"));
    auto r = c.read_response();
    EXPECT_EQ(r.status, 200);
    EXPECT_EQ(r.headers.count("connection"), 0u);
  }
  // The default budget: max_connections less 1/16 of it.
  service::HttpServerOptions d;
  d.max_connections = 16384;
  EXPECT_EQ(d.kept_connections(), 15360u);
  d.max_kept_connections = 20000;
  EXPECT_EQ(d.kept_connections(), 16384u);  // never above the limit
}

TEST(HttpServerLimits, ManyIdleClientsAndParkedRequestsDoNotBlockAFreshOne) {
  TestServer s;
  std::vector<RawHttpClient> idle;
  for (int i = 0; i < 300; ++i) {
    RawHttpClient c(s.port());
    ASSERT_GE(c.fd(), 0);
    c.send(http_get("/healthz"));
    idle.push_back(std::move(c));
  }
  for (auto& c : idle) ASSERT_EQ(c.read_response().status, 200);
  // More parked requests than there are handler threads (8).
  std::vector<RawHttpClient> parked;
  for (int i = 0; i < 64; ++i) {
    RawHttpClient c(s.port());
    c.send(http_get("/api/v1/park", "T0KEN"));
    parked.push_back(std::move(c));
  }
  ASSERT_TRUE(s.wait_parked(64));
  int status = 0;
  EXPECT_LT(fresh_request_time(s.port(), &status), 1000ms);
  EXPECT_EQ(status, 200);
  RawHttpClient again = std::move(idle[17]);
  again.send(http_get("/healthz"));
  EXPECT_EQ(again.read_response(1s).status, 200);
  s.release_parked();
  for (auto& c : parked) EXPECT_EQ(c.read_response().status, 200);
}

// Launched programs (mpirun) must not inherit the port or a client's socket.
TEST(HttpServerLimits, EverySocketIsCloseOnExec) {
  TestServer s;
  RawHttpClient c(s.port());
  c.send(http_get("/healthz"));
  ASSERT_EQ(c.read_response().status, 200);
  int sockets = 0;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/fd")) {
    std::error_code ec;
    const auto target = std::filesystem::read_symlink(entry.path(), ec);
    if (ec || target.string().rfind("socket:", 0) != 0) continue;
    const int fd = std::stoi(entry.path().filename().string());
    ++sockets;
    EXPECT_TRUE(::fcntl(fd, F_GETFD) & FD_CLOEXEC) << "socket fd " << fd << " is inherited by exec";
  }
  EXPECT_GE(sockets, 3);  // the listener, the accepted connection, the client
}

TEST(HttpServerLimits, StopClosesEverythingPromptlyAndLateRepliesAreHarmless) {
  auto s = std::make_unique<TestServer>();
  std::vector<RawHttpClient> clients;
  for (int i = 0; i < 200; ++i) clients.emplace_back(s->port());
  RawHttpClient parked(s->port()), streamed(s->port());
  parked.send(http_get("/api/v1/park", "T0KEN"));
  streamed.send(http_get("/api/v1/stream", "T0KEN"));
  ASSERT_TRUE(s->wait_parked(1));
  ASSERT_TRUE(s->wait_streams(1));
  auto stream = s->stream(0);
  auto replies = s->take_parked();
  const auto start = std::chrono::steady_clock::now();
  s->stop();
  EXPECT_LT(std::chrono::steady_clock::now() - start, 3s);
  EXPECT_TRUE(stream->closed());
  EXPECT_FALSE(stream->write("late"));
  for (auto& c : clients) EXPECT_TRUE(c.closed_within(1s));
  EXPECT_TRUE(parked.closed_within(1s));
  s->destroy();
  for (auto& r : replies) r(service::json_response(200, "too late"));  // no crash, no effect
}

}  // namespace
