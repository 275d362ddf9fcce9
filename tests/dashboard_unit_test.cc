// Unit tests of the dashboard's pieces that need no daemon: the Prometheus
// text writer, cookie parsing, sessions and the Authenticator's
// cookie/CSRF rules, training points (parsing errors, bounds, rate limit),
// the /metrics rendering and the event hub's stream limit.
#include <gtest/gtest.h>

#include <atomic>
#include <functional>
#include <mutex>
#include <sstream>

#include <regex>
#include <thread>

#include "service/auth.h"
#include "service/dashboard/event_hub.h"
#include "service/dashboard/sessions.h"
#include "service/metrics/daemon_metrics.h"
#include "service/metrics/prometheus_text.h"
#include "service/metrics/training_series.h"
#include "temp_dir.h"

using namespace muster;
using namespace muster::service;
using nlohmann::json;

TEST(PrometheusText, EscapesLabelValuesAndHelp) {
  EXPECT_EQ(metrics::escape_label_value("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
  EXPECT_EQ(metrics::escape_help("x\\y\nz \"q\""), "x\\\\y\\nz \"q\"");
  metrics::TextWriter w;
  w.family("m_total", "counter", "Help with\nnewline.");
  w.sample("m_total", {{"route", "/a/{id}"}, {"v", "q\"uote"}}, 3);
  EXPECT_EQ(w.text(),
            "# HELP m_total Help with\\nnewline.\n# TYPE m_total counter\n"
            "m_total{route=\"/a/{id}\",v=\"q\\\"uote\"} 3\n");
}

TEST(PrometheusText, FormatsValues) {
  EXPECT_EQ(metrics::format_value(0), "0");
  EXPECT_EQ(metrics::format_value(12), "12");
  EXPECT_EQ(metrics::format_value(0.001), "0.001");
  EXPECT_EQ(metrics::format_value(0.1 + 0.2), "0.30000000000000004");
  EXPECT_EQ(metrics::format_value(std::numeric_limits<double>::infinity()), "+Inf");
  EXPECT_EQ(metrics::format_value(std::nan("")), "NaN");
}

TEST(PrometheusText, HistogramBucketsAreCumulativeWithInf) {
  metrics::Histogram h({0.1, 1, 10});
  for (double v : {0.05, 0.1, 0.5, 5.0, 50.0}) h.observe(v);
  metrics::TextWriter w;
  w.family("lat_seconds", "histogram", "Latency.");
  w.histogram("lat_seconds", {{"code", "200"}}, h.snapshot());
  EXPECT_EQ(w.text(),
            "# HELP lat_seconds Latency.\n# TYPE lat_seconds histogram\n"
            "lat_seconds_bucket{code=\"200\",le=\"0.1\"} 2\n"
            "lat_seconds_bucket{code=\"200\",le=\"1\"} 3\n"
            "lat_seconds_bucket{code=\"200\",le=\"10\"} 4\n"
            "lat_seconds_bucket{code=\"200\",le=\"+Inf\"} 5\n"
            "lat_seconds_sum{code=\"200\"} 55.65\n"
            "lat_seconds_count{code=\"200\"} 5\n");
}

TEST(Cookies, FindsTheNamedCookieOnly) {
  EXPECT_EQ(cookie_value("a=1; muster_session_7=abc; b=2", "muster_session_7"), "abc");
  EXPECT_EQ(cookie_value("muster_session_70=x", "muster_session_7"), std::nullopt);
  EXPECT_EQ(cookie_value("xmuster_session_7=x", "muster_session_7"), std::nullopt);
  EXPECT_EQ(cookie_value("", "a"), std::nullopt);
}

TEST(Sessions, CookieIsHttpOnlyStrictAndHoldsNoToken) {
  SessionStore store({"muster_session_1", std::chrono::seconds(60), 2});
  const auto s = store.create();
  EXPECT_EQ(s.id.size(), 64u);
  EXPECT_NE(s.id, s.csrf_token);
  const std::string cookie = store.set_cookie(s);
  EXPECT_NE(cookie.find("HttpOnly"), std::string::npos);
  EXPECT_NE(cookie.find("SameSite=Strict"), std::string::npos);
  EXPECT_EQ(store.csrf_token(s.id), s.csrf_token);
  EXPECT_EQ(store.from_cookie_header("muster_session_1=" + s.id)->csrf_token, s.csrf_token);
  // At most two sessions: a third evicts the least recently used.
  const auto b = store.create();
  (void)store.csrf_token(s.id);
  const auto c = store.create();
  EXPECT_TRUE(store.csrf_token(s.id));
  EXPECT_FALSE(store.csrf_token(b.id));
  store.remove(c.id);
  EXPECT_FALSE(store.csrf_token(c.id));
}

class CookieAuth : public ::testing::Test {
 protected:
  CookieAuth() : auth_(std::string(64, 'd'), [](const std::string& t) -> std::optional<std::string> {
                   if (t == "agent-token-of-w1") return std::string("w1");
                   return std::nullopt;
                 }) {
    session_ = sessions_.create();
    auth_.set_sessions([this](const std::string& header) -> std::optional<std::string> {
      auto s = sessions_.from_cookie_header(header);
      if (!s) return std::nullopt;
      return s->csrf_token;
    });
  }
  std::map<std::string, std::string> cookie() { return {{"cookie", "muster_session=" + session_.id}}; }
  SessionStore sessions_;
  SessionStore::Session session_;
  Authenticator auth_;
};

TEST_F(CookieAuth, GetWithCookieIsEnough) {
  EXPECT_TRUE(auth_.check(AuthKind::kUser, cookie(), "GET", ""));
  EXPECT_EQ(auth_.check(AuthKind::kUser, {{"cookie", "muster_session=forged"}}, "GET", "").code(),
            api::ErrorCode::kUnauthenticated);
}

TEST_F(CookieAuth, PostWithCookieNeedsTheSessionsCsrfToken) {
  auto h = cookie();
  EXPECT_EQ(auth_.check(AuthKind::kUser, h, "POST", "").code(), api::ErrorCode::kPermissionDenied);
  h["x-csrf-token"] = "wrong";
  EXPECT_EQ(auth_.check(AuthKind::kUser, h, "POST", "").code(), api::ErrorCode::kPermissionDenied);
  h["x-csrf-token"] = session_.csrf_token;
  EXPECT_TRUE(auth_.check(AuthKind::kUser, h, "POST", ""));
}

TEST_F(CookieAuth, BearerNeedsNoCsrfAndCookieNeverActsAsAgent) {
  EXPECT_TRUE(auth_.check(AuthKind::kUser, {{"authorization", "Bearer " + std::string(64, 'd')}}, "POST", ""));
  EXPECT_FALSE(auth_.check(AuthKind::kAgent, cookie(), "POST", "w1"));
  EXPECT_FALSE(auth_.check(AuthKind::kReport, cookie(), "POST", "w1"));
}

TEST_F(CookieAuth, MetricsTokenActsOnlyForItsWorkerAndOnlyOnReportRoutes) {
  const std::string t = "Bearer " + metrics_token(std::string(64, 'd'), "w1");
  EXPECT_TRUE(auth_.check(AuthKind::kReport, t, "w1"));
  EXPECT_FALSE(auth_.check(AuthKind::kReport, t, "w2"));
  EXPECT_FALSE(auth_.check(AuthKind::kAgent, t, "w1"));
  EXPECT_FALSE(auth_.check(AuthKind::kUser, t, ""));
  EXPECT_TRUE(auth_.check(AuthKind::kReport, "Bearer agent-token-of-w1", "w1"));
}

TEST(TrainingPoints, BadBodiesNameTheField) {
  auto bad = [](const json& body) { return parse_training_points(body, 10).status().field(); };
  EXPECT_EQ(bad(json::object()), "points");
  EXPECT_EQ(bad({{"points", json::array()}}), "points");
  EXPECT_EQ(bad({{"points", {{{"loss", 1}}}}}), "points[0].step");
  EXPECT_EQ(bad({{"points", {{{"step", 1}, {"loss", "x"}}}}}), "points[0].loss");
  EXPECT_EQ(bad({{"points", {{{"step", 1}, {"loss", 1}}, {{"step", 2}, {"lr", 0.1}, {"speed", 3}}}}}),
            "points[1].speed");
  EXPECT_EQ(bad({{"points", {{{"step", 1}}}}}), "points[0]");
  json many = {{"points", json::array()}};
  for (int i = 0; i < 11; ++i) many["points"].push_back({{"step", i}, {"loss", 1.0}});
  EXPECT_EQ(bad(many), "points");
  auto ok = parse_training_points({{"points", {{{"step", 3}, {"loss", 0.5}, {"accuracy", nullptr}}}}}, 10);
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->at(0).step, 3);
  EXPECT_EQ(*ok->at(0).loss, 0.5);
  EXPECT_FALSE(ok->at(0).accuracy);
}

TEST(TrainingPoints, AnyScalarByNameWithRankAndTotal) {
  auto ok = parse_training_points(
      {{"points", {{{"step", 3}, {"rank", 1}, {"total_steps", 100}, {"scalars", {{"Train/Loss", 0.5}, {"lr", 0.1}}}}}}},
      10);
  ASSERT_TRUE(ok) << ok.status().message();
  EXPECT_EQ(*ok->at(0).rank, 1);
  EXPECT_EQ(*ok->at(0).total_steps, 100);
  EXPECT_EQ(ok->at(0).scalars.at("Train/Loss"), 0.5);
  EXPECT_EQ(*ok->at(0).lr, 0.1);  // a classic name under scalars is the classic scalar
  auto bad = [](const json& point) { return parse_training_points({{"points", {point}}}, 10).status().field(); };
  EXPECT_EQ(bad({{"step", 1}, {"scalars", {{"a,b", 1}}}}), "points[0].scalars.a,b");
  EXPECT_EQ(bad({{"step", 1}, {"scalars", {{std::string(65, 'x'), 1}}}}), "points[0].scalars." + std::string(65, 'x'));
  EXPECT_EQ(bad({{"step", 1}, {"scalars", {{"acc", "high"}}}}), "points[0].scalars.acc");
  EXPECT_EQ(bad({{"step", 1}, {"scalars", 3}}), "points[0].scalars");
  EXPECT_EQ(bad({{"step", 1}, {"loss", 1}, {"rank", 70000}}), "points[0].rank");
  EXPECT_EQ(bad({{"step", 1}, {"loss", 1}, {"total_steps", 0}}), "points[0].total_steps");
  EXPECT_EQ(bad({{"step", 1}, {"scalars", json::object()}}), "points[0]");  // no scalar at all
}

TEST(TrainingSeries, FullSeriesAreThinnedAndStillSpanTheRun) {
  TrainingSeriesOptions o;
  o.max_points = 10;
  TrainingSeries series(o);
  for (int i = 0; i < 100; ++i) {
    TrainingPoint p;
    p.step = i;
    p.time = i;
    p.loss = 1.0 / (i + 1);
    ASSERT_TRUE(series.add("w1", std::string("c1"), {p}));
  }
  auto curves = series.worker_series("w1");
  ASSERT_EQ(curves.size(), 1u);
  const auto& pts = curves[0].points;
  EXPECT_LT(pts.size(), 10u);
  EXPECT_GE(pts.size(), 5u);
  EXPECT_EQ(pts.front().step, 0);  // the start of the run stays
  EXPECT_EQ(pts.back().step, 99);  // and the newest point
  for (size_t i = 1; i < pts.size(); ++i) EXPECT_LT(pts[i - 1].step, pts[i].step);
  EXPECT_EQ(series.cluster_series("c1").size(), 1u);
  EXPECT_DOUBLE_EQ(*series.latest_by_cluster().at("c1").loss, 0.01);
  EXPECT_EQ(series.latest_by_cluster().at("c1").step, 99);
}

TEST(TrainingSeries, OneSeriesPerRankAndNameWithBoundedNamesAndSeries) {
  TrainingSeriesOptions o;
  o.max_names = 3;
  o.max_series = 4;
  TrainingSeries series(o);
  auto point = [](int step, std::optional<int> rank, std::map<std::string, double> scalars) {
    TrainingPoint p;
    p.step = step;
    p.time = step;
    p.rank = rank;
    p.scalars = std::move(scalars);
    return p;
  };
  ASSERT_TRUE(series.add("w1", std::string("c1"), {point(1, 0, {{"a", 1}}), point(1, 1, {{"a", 2}})}));
  auto curves = series.cluster_series("c1");
  ASSERT_EQ(curves.size(), 2u);
  EXPECT_EQ(*curves[0].rank, 0);
  EXPECT_EQ(*curves[1].rank, 1);
  ASSERT_TRUE(series.add("w1", std::string("c1"), {point(2, 0, {{"b", 1}, {"c", 1}})}));
  // A fourth name is refused, naming it, and nothing of that batch is added.
  auto refused = series.add("w1", std::string("c1"), {point(3, 0, {{"a", 3}}), point(3, 0, {{"d", 1}})});
  EXPECT_EQ(refused.code(), muster::api::ErrorCode::kInvalidArgument);
  EXPECT_EQ(refused.field(), "points[1].scalars.d");
  for (const auto& c : series.worker_series("w1")) EXPECT_LT(c.points.back().step, 3) << c.name;
  // Another worker's series evict the least recently updated one.
  ASSERT_TRUE(series.add("w2", std::nullopt, {point(1, std::nullopt, {{"x", 1}})}));
  EXPECT_EQ(series.series_count(), 4u);
  EXPECT_EQ(series.worker_series("w1").size(), 3u);
  // Rows merge the series back into one point per (worker, rank, step, time).
  const std::string csv = training_csv(series.worker_series("w1"));
  EXPECT_EQ(csv.substr(0, csv.find('\n')), "step,time,loss,images_per_sec,lr,accuracy,worker,rank,a,b,c");
  EXPECT_NE(csv.find("\n2,2.000,,,,,w1,0,,1,1\n"), std::string::npos) << csv;
}

TEST(TrainingSeries, CurvesSurviveARestartThroughTheStore) {
  muster::testing::TempDir tmp("muster-series");
  const std::string db = (tmp.path() / "training.db").string();
  TrainingSeriesOptions o;
  o.max_points = 50;
  {
    auto store = SeriesStore::open(db);
    ASSERT_TRUE(store) << store.status().message();
    TrainingSeries series(o, store.value().get());
    ASSERT_TRUE(series.restore());
    for (int i = 0; i < 200; ++i) {
      TrainingPoint p;
      p.step = i;
      p.time = 1000 + i;
      p.rank = i % 2;
      p.total_steps = 400;
      p.loss = 2.0 - i / 100.0;
      p.scalars["Train/Acc"] = i / 200.0;
      ASSERT_TRUE(series.add("w1", std::string("c1"), {p}));
    }
  }
  auto store = SeriesStore::open(db);
  ASSERT_TRUE(store);
  TrainingSeries again(o, store.value().get());
  ASSERT_TRUE(again.restore());
  auto before = again.cluster_series("c1");
  ASSERT_EQ(before.size(), 4u);  // 2 ranks x 2 names
  for (const auto& c : before) {
    EXPECT_LT(c.points.size(), 50u) << c.name;
    EXPECT_EQ(*c.total_steps, 400);
    EXPECT_EQ(c.points.back().step, 198 + *c.rank) << c.name;
  }
  // It goes on where it was, and what was thinned away is gone from the file too.
  TrainingPoint next;
  next.step = 200;
  next.time = 1200;
  next.rank = 0;
  next.loss = 0.1;
  ASSERT_TRUE(again.add("w1", std::string("c1"), {next}));
  auto raw = store.value()->load();
  ASSERT_TRUE(raw);
  size_t rows = 0;
  for (const auto& s : raw.value()) rows += s.points.size();
  size_t kept = 0;
  for (const auto& c : again.cluster_series("c1")) kept += c.points.size();
  EXPECT_EQ(rows, kept);
}

TEST(TrainingSeries, RateLimitsEachWorker) {
  TrainingSeriesOptions o;
  o.max_reports_per_second = 5;
  TrainingSeries series(o);
  const auto t0 = std::chrono::steady_clock::now();
  int admitted = 0;
  for (int i = 0; i < 20; ++i) admitted += series.admit("w1", t0);
  EXPECT_EQ(admitted, 5);
  EXPECT_TRUE(series.admit("w2", t0));  // per worker
  EXPECT_TRUE(series.admit("w1", t0 + std::chrono::milliseconds(250)));  // refilled
}

TEST(DaemonMetrics, RendersEveryFamilyWithRoutePatterns) {
  DaemonMetrics m;
  m.observe_request("GET", "/api/v1/workers/{id}", 200, 0.003);
  m.observe_request("GET", "/api/v1/workers/{id}", 200, 0.2);
  m.observe_store_write(0.002);
  api::Worker w;
  w.id = "w1";
  w.status = api::WorkerStatus::kRunning;
  m.on_worker_change(w);
  w.status = api::WorkerStatus::kFailed;
  m.on_worker_change(w);
  m.on_worker_change(w);  // reported twice, counted once
  TrainingSeries series;
  TrainingPoint point;
  point.step = 7;
  point.loss = 0.25;
  point.images_per_sec = 900.0;
  ASSERT_TRUE(series.add("w1", std::string("c1"), {point}));
  DaemonMetrics::Sources src;
  src.backend = "local";
  src.worker_counts = [w] { return std::map<api::WorkerStatus, size_t>{{w.status, 1}}; };
  src.clusters = [] {
    api::Cluster c;
    c.id = "c1";
    c.status = api::ClusterStatus::kRunning;
    c.request.mode = api::ClusterKind::kMpi;
    return std::vector<api::Cluster>{c};
  };
  src.training = &series;
  const std::string text = m.render(src);
  for (const char* line : {"muster_workers{status=\"failed\",backend=\"local\"} 1",
                           "muster_workers{status=\"running\",backend=\"local\"} 0",
                           "muster_worker_launches_total 1", "muster_worker_failures_total 1",
                           "muster_clusters{mode=\"mpi\",status=\"running\"} 1",
                           "muster_http_requests_total{method=\"GET\",route=\"/api/v1/workers/{id}\",code=\"200\"} 2",
                           "muster_http_request_duration_seconds_bucket{method=\"GET\",route=\"/api/v1/workers/{id}\","
                           "code=\"200\",le=\"0.005\"} 1",
                           "muster_store_write_duration_seconds_count 1", "muster_training_loss{cluster=\"c1\"} 0.25",
                           "muster_training_images_per_second{cluster=\"c1\"} 900", "# TYPE muster_heartbeat_lag_seconds gauge"}) {
    EXPECT_NE(text.find(std::string(line) + "\n"), std::string::npos) << line << "\n" << text;
  }
  // Every sample line parses as name{labels} value.
  const std::regex sample(R"(^[a-zA-Z_:][a-zA-Z0-9_:]*(\{([a-zA-Z_]+="([^"\\]|\\.)*",?)*\})? [-+0-9.eE]+|[-+]Inf|NaN$)");
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] == '#') continue;
    EXPECT_TRUE(std::regex_match(line, sample)) << line;
  }
}

namespace {
class FakeStream : public Stream {
 public:
  bool write(std::string chunk) override {
    std::lock_guard<std::mutex> lock(mu);
    if (closed_) return false;
    text += chunk;
    queued += chunk.size();
    return true;
  }
  void close() override {
    std::lock_guard<std::mutex> lock(mu);
    closed_ = true;
  }
  bool closed() const override {
    std::lock_guard<std::mutex> lock(mu);
    return closed_;
  }
  size_t queued_bytes() const override {
    std::lock_guard<std::mutex> lock(mu);
    return queued;
  }
  // The client reads what was queued.
  void drain() {
    std::lock_guard<std::mutex> lock(mu);
    queued = 0;
  }
  std::string snapshot_text() const {
    std::lock_guard<std::mutex> lock(mu);
    return text;
  }
  mutable std::mutex mu;
  std::string text;
  size_t queued = 0;
  bool closed_ = false;
};

// Objects with ids "<prefix>00000".."<prefix><n-1>", served in id order.
SnapshotSource::Page objects(std::string prefix, size_t n, std::atomic<int>* reads = nullptr) {
  return [prefix, n, reads](const std::string& after, size_t limit) {
    if (reads) ++*reads;
    std::vector<json> out;
    for (size_t i = 0; i < n && out.size() < limit; ++i) {
      char id[32];
      std::snprintf(id, sizeof id, "%s%05zu", prefix.c_str(), i);
      if (!after.empty() && id <= after) continue;
      out.push_back({{"id", id}});
    }
    return out;
  };
}

bool wait_until(const std::function<bool()>& ok) {
  for (int i = 0; i < 1000; ++i) {
    if (ok()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return ok();
}
}  // namespace

TEST(EventHub, SnapshotThenEventsAndAStreamLimit) {
  EventHubOptions o;
  o.max_streams = 1;
  EventHub hub(o, SnapshotSource{objects("c", 0), objects("w", 0)});
  Response r = hub.open();
  ASSERT_TRUE(r.stream);
  EXPECT_EQ(r.content_type, "text/event-stream");
  auto s = std::make_shared<FakeStream>();
  r.stream(s);
  ASSERT_TRUE(wait_until([&] { return s->snapshot_text().find("\"complete\":true") != std::string::npos; }));
  hub.publish("worker", {{"id", "w1"}, {"reason", "line\nbreak"}});
  EXPECT_EQ(s->snapshot_text(),
            "retry: 2000\n\n"
            "event: snapshot\ndata: {\"clusters\":[],\"complete\":false,\"part\":0,\"workers\":[]}\n\n"
            "event: snapshot\ndata: {\"clusters\":[],\"complete\":true,\"part\":1,\"workers\":[]}\n\n"
            "event: worker\ndata: {\"id\":\"w1\",\"reason\":\"line\\nbreak\"}\n\n");
  EXPECT_EQ(hub.open().http_status, 503);
  s->close();
  EXPECT_TRUE(hub.open().stream);  // a closed stream frees its place
}

TEST(EventHub, HeartbeatsKeepStreamsAliveAndForgetClosedOnes) {
  EventHubOptions o;
  o.max_streams = 2;
  o.heartbeat = std::chrono::milliseconds(20);
  EventHub hub(o, SnapshotSource{});
  auto a = std::make_shared<FakeStream>(), b = std::make_shared<FakeStream>();
  hub.open().stream(a);
  hub.open().stream(b);
  b->close();
  EXPECT_TRUE(wait_until([&] { return a->snapshot_text().find(": heartbeat\n\n") != std::string::npos; }));
  EXPECT_EQ(hub.stream_count(), 1u);
}

// 20,000 workers arrive in pieces of at most `piece`, each read only when
// the stream's queue has room: a reader that stops reading stops the
// snapshot (it is not buffered whole), and one that reads gets all of it.
TEST(EventHub, TheSnapshotComesInBoundedPiecesAsTheClientReads) {
  EventHubOptions o;
  o.piece = 200;
  o.max_queued_bytes = 4 << 10;  // about one piece of 200 small workers
  o.pace = std::chrono::milliseconds(1);
  std::atomic<int> reads{0};
  EventHub hub(o, SnapshotSource{objects("c", 3), objects("w", 20'000, &reads)});
  auto s = std::make_shared<FakeStream>();
  hub.open().stream(s);
  ASSERT_TRUE(wait_until([&] { return reads.load() > 0; }));
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_LE(reads.load(), 3) << "pieces were read while the client read nothing";
  while (s->snapshot_text().find("\"complete\":true") == std::string::npos) {
    s->drain();
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  size_t workers = 0, pieces = 0, largest = 0;
  std::istringstream in(s->snapshot_text());
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("data: ", 0) != 0) continue;
    const auto piece = json::parse(line.substr(6));
    EXPECT_EQ(piece.at("part").get<size_t>(), pieces++);
    workers += piece.at("workers").size();
    largest = std::max(largest, piece.at("workers").size());
  }
  EXPECT_EQ(workers, 20'000u);
  EXPECT_LE(largest, 200u);
}

// A change published while the snapshot is under way follows at once for an
// object already sent, and is left out for one not sent yet (its piece,
// read later, carries it as it is then); a change published while a piece
// is being read waits until that piece is written, then follows the same
// rule by the new cursor.
TEST(EventHub, ChangesDuringTheSnapshotFollowWhatWasSent) {
  EventHubOptions o;
  o.piece = 2;
  o.max_queued_bytes = 1;  // one piece per pass: the test reads in between
  o.pace = std::chrono::milliseconds(1);
  EventHub* hub_ptr = nullptr;
  std::atomic<bool> during{false};
  auto workers = objects("w", 6);
  SnapshotSource source{objects("c", 0), [&](const std::string& after, size_t limit) {
                          if (after == "w00001" && !during.exchange(true)) {
                            hub_ptr->publish("worker", {{"id", "w00000"}, {"v", "late"}});
                            hub_ptr->publish("worker", {{"id", "w00002"}, {"v", "held"}});
                          }
                          return workers(after, limit);
                        }};
  EventHub hub(o, source);
  hub_ptr = &hub;
  auto s = std::make_shared<FakeStream>();
  hub.open().stream(s);
  auto has = [&](const char* what) { return s->snapshot_text().find(what) != std::string::npos; };
  s->drain();  // the client reads "retry: 2000"
  ASSERT_TRUE(wait_until([&] { return has("\"part\":0"); }));
  std::this_thread::sleep_for(std::chrono::milliseconds(20));  // the hub waits for the client to read
  hub.publish("worker", {{"id", "w00000"}, {"v", "early"}});    // no worker sent yet: left out
  s->drain();
  ASSERT_TRUE(wait_until([&] { return has("w00001"); }));
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  hub.publish("worker", {{"id", "w00000"}, {"v", "sent"}});     // sent already: follows at once
  hub.publish("worker", {{"id", "w00004"}, {"v", "dropped"}});  // not yet: its piece carries it
  hub.publish("cluster", {{"id", "c-1"}, {"v", "cluster"}});    // the clusters are all sent
  while (!has("\"complete\":true")) {
    s->drain();
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  const std::string text = s->snapshot_text();
  EXPECT_FALSE(has("\"early\"")) << text;
  EXPECT_FALSE(has("\"dropped\"")) << text;
  EXPECT_TRUE(has("\"sent\"")) << text;
  EXPECT_TRUE(has("\"cluster\"")) << text;
  for (const char* held : {"\"late\"", "\"held\""}) {
    ASSERT_TRUE(has(held)) << held << text;
    EXPECT_GT(text.find(held), text.find("w00003")) << held << " went out before the piece being read";
  }
}
