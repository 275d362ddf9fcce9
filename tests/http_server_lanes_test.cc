// The HTTP server's two lanes of handler threads: agent routes (register,
// heartbeat, exit) run on threads of their own, so an agent is answered at
// once while every user handler thread is busy and user requests queue; and
// a request knows when it arrived, so a heartbeat that waited counts from
// its arrival. An inline route (Router::add_inline: the heartbeat) runs on
// the I/O thread, answered while every handler thread of both lanes is busy.
#include <gtest/gtest.h>

#include <future>
#include <thread>

#include "raw_http_client.h"
#include "service/http_server.h"

using namespace muster;
using namespace std::chrono_literals;
using muster::testing::http_get;
using muster::testing::RawHttpClient;

namespace {

std::string post(const std::string& path, const std::string& token) {
  return "POST " + path + " HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer " + token + "\r\nContent-Length: 2\r\n\r\n{}";
}

TEST(HttpServerLanes, AgentsAreAnsweredWhileEveryUserHandlerIsBusy) {
  service::Router router;
  service::Authenticator auth("T0KEN", [](const std::string& t) -> std::optional<std::string> {
    if (t == "AGENT") return std::string("w1");
    return std::nullopt;
  });
  std::promise<void> unblock;
  auto unblocked = unblock.get_future().share();
  std::atomic<int> busy{0};
  router.add("POST", "/api/v1/slow", service::AuthKind::kUser, [&](const service::Request&, service::Reply reply) {
    ++busy;
    unblocked.wait();
    reply(service::json_response(200, "slow"));
  });
  std::atomic<int64_t> waited_us{-1};
  router.add("POST", "/api/v1/agent/workers/{id}/heartbeat", service::AuthKind::kAgent,
             [&](const service::Request& req, service::Reply reply) {
               waited_us = std::chrono::duration_cast<std::chrono::microseconds>(
                               std::chrono::steady_clock::now() - req.received)
                               .count();
               reply(service::json_response(200, nlohmann::json::object()));
             });
  EXPECT_EQ(router.routes().back().lane, service::Lane::kAgent);
  EXPECT_EQ(router.routes().front().lane, service::Lane::kUser);
  service::HttpServerOptions o;
  o.port = 0;
  o.handler_threads = 2;
  o.agent_handler_threads = 1;
  service::HttpServer server(o, router, auth);
  ASSERT_TRUE(server.start().is_ok());

  // Every user thread busy, and more user requests queued behind them.
  std::vector<RawHttpClient> users;
  for (int i = 0; i < 6; ++i) {
    users.emplace_back(server.port());
    ASSERT_TRUE(users.back().send(post("/api/v1/slow", "T0KEN")));
  }
  for (int i = 0; i < 500 && busy < 2; ++i) std::this_thread::sleep_for(10ms);
  ASSERT_EQ(busy.load(), 2);

  RawHttpClient agent(server.port());
  const auto start = std::chrono::steady_clock::now();
  ASSERT_TRUE(agent.send(post("/api/v1/agent/workers/w1/heartbeat", "AGENT")));
  const auto r = agent.read_response(5s);
  EXPECT_EQ(r.status, 200) << "the agent's heartbeat queued behind user requests";
  EXPECT_LT(std::chrono::steady_clock::now() - start, 3s);
  EXPECT_GE(waited_us.load(), 0);
  EXPECT_EQ(busy.load(), 2) << "no user request got through meanwhile";
  unblock.set_value();
  for (auto& u : users) EXPECT_EQ(u.read_response(10s).status, 200);
  server.stop();
}

TEST(HttpServerLanes, InlineRoutesAreAnsweredWhileEveryHandlerThreadIsBusy) {
  service::Router router;
  service::Authenticator auth("T0KEN", [](const std::string& t) -> std::optional<std::string> {
    if (t == "AGENT") return std::string("w1");
    return std::nullopt;
  });
  std::promise<void> unblock;
  auto unblocked = unblock.get_future().share();
  std::atomic<int> busy{0};
  auto slow = [&](const service::Request&, service::Reply reply) {
    ++busy;
    unblocked.wait();
    reply(service::json_response(200, "slow"));
  };
  router.add("POST", "/api/v1/slow", service::AuthKind::kUser, slow);
  router.add("POST", "/api/v1/agent/workers/{id}/exit", service::AuthKind::kAgent, slow);
  std::atomic<std::thread::id> ran_on{};
  router.add_inline("POST", "/api/v1/agent/workers/{id}/heartbeat", service::AuthKind::kAgent,
                    [&](const service::Request&, service::Reply reply) {
                      ran_on = std::this_thread::get_id();
                      reply(service::json_response(200, nlohmann::json::object()));
                    });
  EXPECT_EQ(router.routes().back().lane, service::Lane::kInline);
  service::HttpServerOptions o;
  o.port = 0;
  o.handler_threads = 1;
  o.agent_handler_threads = 1;
  o.io_threads = 2;
  service::HttpServer server(o, router, auth);
  ASSERT_TRUE(server.start().is_ok());

  RawHttpClient user(server.port()), exiting(server.port());
  ASSERT_TRUE(user.send(post("/api/v1/slow", "T0KEN")));
  ASSERT_TRUE(exiting.send(post("/api/v1/agent/workers/w1/exit", "AGENT")));
  for (int i = 0; i < 500 && busy < 2; ++i) std::this_thread::sleep_for(10ms);
  ASSERT_EQ(busy.load(), 2) << "both lanes' only threads are blocked";

  // Heartbeats on several connections (spread over both I/O threads), each
  // answered although no handler thread is free.
  for (int i = 0; i < 4; ++i) {
    RawHttpClient agent(server.port());
    ASSERT_TRUE(agent.send(post("/api/v1/agent/workers/w1/heartbeat", "AGENT")));
    EXPECT_EQ(agent.read_response(5s).status, 200) << "heartbeat " << i << " waited for a handler thread";
    EXPECT_NE(ran_on.load(), std::this_thread::get_id());
  }
  unblock.set_value();
  EXPECT_EQ(user.read_response(10s).status, 200);
  EXPECT_EQ(exiting.read_response(10s).status, 200);
  server.stop();
}

}  // namespace
