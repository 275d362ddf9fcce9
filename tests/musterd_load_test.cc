// A real musterd under the load that wedged the old cpprest server for
// good: 256 idle keep-alive clients, a parked await, and 64
// connections hammering POST and GET routes at once; a fresh request must
// still answer quickly, and SIGTERM must stop the daemon within seconds
// while all of that is still connected.
#include <gtest/gtest.h>
#include <signal.h>

#include <atomic>
#include <fstream>
#include <thread>

#include "daemon_process.h"
#include "raw_http_client.h"

using muster::testing::DaemonProcess;
using muster::testing::http_get;
using muster::testing::RawHttpClient;
using nlohmann::json;
using namespace std::chrono_literals;

namespace {

std::string post(const std::string& path, const json& body, const std::string& token) {
  const std::string text = body.dump();
  return "POST " + path + " HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer " + token +
         "\r\nContent-Type: application/json\r\nContent-Length: " + std::to_string(text.size()) + "\r\n\r\n" + text;
}

TEST(MusterdLoad, ManyClientsAndLoadNeverWedgeAndSigtermStops) {
  DaemonProcess d;
  d.write_script("sleep.py", "import time\ntime.sleep(300)\n");
  ASSERT_TRUE(d.start({"--heartbeat-interval", "0.5"})) << d.stderr_text();
  std::string token;
  std::getline(std::ifstream(d.state() / "token"), token);
  const int port = std::stoi(d.port());

  auto r = d.post("/api/v1/workers", {{"n", 1}, {"cpu", 0.1}, {"memory", 0.1}, {"script", "sleep.py"}});
  ASSERT_EQ(r.status, 201) << r.body;
  const std::string id = r.json()["workers"][0]["id"];
  r = d.post("/api/v1/workers/await", {{"ids", {id}}, {"wait_for_completion", false}, {"timeout_seconds", 60}});
  ASSERT_EQ(r.status, 200) << r.body;

  // A parked await (the worker sleeps for minutes) and 256 idle clients.
  RawHttpClient parked(port);
  parked.send(post("/api/v1/workers/await", {{"ids", {id}}, {"wait_for_completion", true}, {"timeout_seconds", 120}},
                   token));
  std::vector<RawHttpClient> idle;
  for (int i = 0; i < 256; ++i) {
    idle.emplace_back(port);
    idle.back().send(http_get("/healthz"));
  }
  for (auto& c : idle) ASSERT_EQ(c.read_response().status, 200);

  // 64 connections, each a keep-alive loop of a POST with a body and a GET.
  std::atomic<int> ok{0}, failed{0};
  std::atomic<bool> run{true};
  std::vector<std::thread> load;
  for (int t = 0; t < 64; ++t) {
    load.emplace_back([&] {
      RawHttpClient c(port);
      const std::string await =
          post("/api/v1/workers/await", {{"ids", {id}}, {"wait_for_completion", false}, {"timeout_seconds", 5}}, token);
      const std::string get = http_get("/api/v1/workers/" + id, token);
      for (int i = 0; run; ++i) {
        c.send(i % 2 ? get : await);
        const auto resp = c.read_response(5s);
        if (resp.status == 200) {
          ++ok;
        } else {
          ++failed;
          c.connect(port);
        }
      }
    });
  }
  std::this_thread::sleep_for(2s);
  // A fresh request answers quickly while the load runs.
  const auto fresh_start = std::chrono::steady_clock::now();
  RawHttpClient fresh(port);
  fresh.send(http_get("/api/v1/workers", token));
  EXPECT_EQ(fresh.read_response(3s).status, 200);
  EXPECT_LT(std::chrono::steady_clock::now() - fresh_start, 2s);
  run = false;
  for (auto& t : load) t.join();
  EXPECT_EQ(failed.load(), 0);
  EXPECT_GT(ok.load(), 500) << "64 clients for 2 s";

  // After the load: still answering, and the parked await still waits.
  RawHttpClient after(port);
  after.send(http_get("/api/v1/workers/" + id, token));
  EXPECT_EQ(after.read_response(2s).status, 200);
  EXPECT_EQ(parked.read_response(10ms).status, 0);

  // Stopping the worker answers the parked await (a reply from another
  // thread, long after its request was read).
  r = d.post("/api/v1/workers/stop", {{"ids", {id}}});
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(parked.read_response(10s).status, 200);

  // SIGTERM with 256 idle clients and a half-sent request still open.
  RawHttpClient half(port);
  half.send("POST /api/v1/workers/await HTTP/1.1\r\nContent-Length: 100\r\n\r\n{");
  const auto stop_start = std::chrono::steady_clock::now();
  d.kill(SIGTERM);
  EXPECT_LT(std::chrono::steady_clock::now() - stop_start, 5s) << d.stderr_text();
  EXPECT_TRUE(idle[0].closed_within(1s));
}

}  // namespace
