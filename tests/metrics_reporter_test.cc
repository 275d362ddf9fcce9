// The runtime's metrics reporter against a real HTTP server (musterd's, with
// only the metrics route): points arrive batched with the metrics token,
// report() never blocks when the daemon is absent or gone, and without the
// environment the reporter does nothing.
#include "runtime/report/metrics_reporter.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <mutex>

#include "service/http_server.h"
#include "service/metrics/training_series.h"

using namespace muster;
using namespace std::chrono_literals;
namespace report = muster::runtime::report;

namespace {
const std::string kDaemonToken(64, 'a');

struct Server {
  service::Router router;
  service::Authenticator auth{kDaemonToken, [](const std::string&) { return std::nullopt; }};
  std::mutex mu;
  std::vector<service::TrainingPoint> points;
  int requests = 0;
  std::unique_ptr<service::HttpServer> http;

  Server() {
    router.add("POST", "/api/v1/agent/workers/{id}/metrics", service::AuthKind::kReport,
               [this](const service::Request& req, service::Reply reply) {
                 auto p = service::parse_training_points(req.body, 1000);
                 if (!p) return reply(service::error_response(p.status()));
                 std::lock_guard<std::mutex> lock(mu);
                 ++requests;
                 points.insert(points.end(), p->begin(), p->end());
                 reply(service::json_response(202, {{"accepted", p->size()}}));
               });
    service::HttpServerOptions o;
    o.port = 0;
    o.port = service::pick_free_port("127.0.0.1").value();
    http = std::make_unique<service::HttpServer>(o, router, auth);
    EXPECT_TRUE(http->start());
  }
  size_t count() {
    std::lock_guard<std::mutex> lock(mu);
    return points.size();
  }
};
}  // namespace

TEST(MetricsReporter, SendsBatchesWithTheMetricsToken) {
  Server server;
  report::ReporterOptions o;
  o.url = server.http->url();
  o.worker_id = "w1";
  o.token = service::metrics_token(kDaemonToken, "w1");
  o.interval = 50ms;
  {
    report::MetricsReporter r(o);
    ASSERT_TRUE(r.enabled());
    for (int i = 1; i <= 100; ++i) {
      report::Point p;
      p.step = i;
      p.loss = 1.0 / i;
      p.images_per_sec = 1000;
      r.report(p);
    }
    report::Point nan;
    nan.step = 101;
    nan.loss = std::nan("");  // dropped from the point, not sent as NaN
    nan.lr = 0.1;
    r.report(nan);
  }  // the destructor sends what is left
  ASSERT_EQ(server.count(), 101u);
  EXPECT_LT(server.requests, 101);  // batched
  EXPECT_EQ(server.points[0].step, 1);
  EXPECT_DOUBLE_EQ(*server.points[1].loss, 0.5);
  EXPECT_FALSE(server.points[100].loss);
  EXPECT_DOUBLE_EQ(*server.points[100].lr, 0.1);
  EXPECT_GT(server.points[0].time, 1.6e9);
}

TEST(MetricsReporter, AWrongTokenLosesOnlyThePoints) {
  Server server;
  report::ReporterOptions o;
  o.url = server.http->url();
  o.worker_id = "w1";
  o.token = service::metrics_token(kDaemonToken, "w2");  // another worker's
  o.interval = 20ms;
  report::MetricsReporter r(o);
  report::Point p;
  p.step = 1;
  p.loss = 1;
  r.report(p);
  for (int i = 0; i < 200 && r.failed_requests() == 0; ++i) std::this_thread::sleep_for(10ms);
  EXPECT_EQ(r.failed_requests(), 1u);
  EXPECT_EQ(r.dropped(), 1u);
  EXPECT_EQ(server.count(), 0u);
}

TEST(MetricsReporter, NeverBlocksWithoutADaemon) {
  report::ReporterOptions o;
  o.url = "http://127.0.0.1:" + std::to_string(service::pick_free_port("127.0.0.1").value());  // nobody listens
  o.worker_id = "w1";
  o.token = "t";
  o.interval = 10ms;
  o.timeout = 200ms;
  o.max_queued = 100;
  const auto start = std::chrono::steady_clock::now();
  {
    report::MetricsReporter r(o);
    for (int i = 0; i < 100000; ++i) {
      report::Point p;
      p.step = i;
      p.loss = 1;
      r.report(p);
    }
    EXPECT_GE(r.dropped(), 100000u - 100u);  // the queue is bounded
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, 3s);
}

TEST(MetricsReporter, DisabledWithoutTheEnvironment) {
  ::unsetenv("MUSTER_URL");
  ::unsetenv("MUSTER_WORKER_ID");
  ::unsetenv("MUSTER_METRICS_TOKEN");
  ::unsetenv("MUSTER_AGENT_TOKEN");
  auto r = report::MetricsReporter::from_env();
  EXPECT_FALSE(r->enabled());
  report::Point p;
  r->report(p);
  EXPECT_EQ(r->dropped(), 0u);
  EXPECT_FALSE(report::parse_http_url("ftp://x:1"));
  EXPECT_FALSE(report::parse_http_url("http://x:99999"));
  // https: verified as the environment says (MUSTER_TLS_FINGERPRINT); a bad pin is an error naming it.
  ::setenv("MUSTER_TLS_FINGERPRINT", std::string(64, 'A').c_str(), 1);
  const auto tls = report::parse_http_url("https://x:1");
  ASSERT_TRUE(tls);
  EXPECT_TRUE(tls->tls);
  EXPECT_EQ(tls->verify.fingerprint, std::string(64, 'a'));
  ::setenv("MUSTER_TLS_FINGERPRINT", "not-hex", 1);
  std::string error;
  EXPECT_FALSE(report::parse_http_url("https://x:1", &error));
  EXPECT_NE(error.find("MUSTER_TLS_FINGERPRINT"), std::string::npos) << error;
  ::unsetenv("MUSTER_TLS_FINGERPRINT");
  EXPECT_EQ(report::parse_http_url("http://10.0.0.1:7878/")->port, 7878);
}
