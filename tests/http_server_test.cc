// The HTTP layer over a real listener on 127.0.0.1 with a FakeBackend (no
// process is started): every served route is in api/openapi.yaml, errors
// map to the documented statuses and JSON, tokens are enforced, and many
// concurrent awaits neither fail nor pin the listener.
#include "service/http_server.h"

#include <gtest/gtest.h>

#include <cpprest/http_client.h>

#include <filesystem>
#include <future>
#include <thread>
#include <fstream>
#include <regex>
#include <set>

#include "fake_backend.h"
#include "service/agent_routes.h"
#include "service/registry/registry.h"
#include "service/worker_routes.h"

namespace fs = std::filesystem;
using namespace muster;
using namespace std::chrono_literals;
using nlohmann::json;
using web::http::methods;

namespace {

class HttpTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/muster-http-XXXXXX";
    dir_ = mkdtemp(tmpl);
    std::ofstream(dir_ / "train.py") << "print(1)\n";
    service::RegistryOptions ro;
    ro.state_dir = dir_;
    ro.project_dir = dir_;
    ro.agent_path = "/bin/true";
    ro.daemon_port = 1;
    ro.async_backend = async_backend_;
    // No ticker runs here: a registered worker counts as running at once.
    ro.await_settle = std::chrono::milliseconds(0);
    registry_ = std::make_unique<service::WorkerRegistry>(ro, backend_, nullptr, clock_);
    service::register_worker_routes(router_, *registry_, {8, fs::canonical(dir_)});
    service::register_agent_routes(router_, *registry_);
    auth_ = std::make_unique<service::Authenticator>(
        "T0KEN", [this](const std::string& t) { return registry_->worker_for_agent_token(t); });
    service::HttpServerOptions ho;
    ho.port = service::pick_free_port("127.0.0.1").value();
    ho.max_body_bytes = 4096;
    server_ = std::make_unique<service::HttpServer>(ho, router_, *auth_);
    ASSERT_TRUE(server_->start().is_ok());
    web::http::client::http_client_config cfg;
    cfg.set_timeout(30s);
    client_ = std::make_unique<web::http::client::http_client>(server_->url(), cfg);
  }
  void TearDown() override {
    backend_.open_gate();  // a launch thread still waiting must end
    server_.reset();
    registry_.reset();
    fs::remove_all(dir_);
  }

  struct Reply {
    int status;
    std::string body;
    json j() const { return json::parse(body, nullptr, false); }
  };
  pplx::task<Reply> send_async(const std::string& method, const std::string& path, const std::string& body,
                               const std::string& token = "T0KEN") {
    web::http::http_request req(method);
    req.set_request_uri(path);
    if (!token.empty()) req.headers().add("Authorization", "Bearer " + token);
    if (!body.empty()) req.set_body(body, "application/json");
    // Chained, not .get() inside the continuation: that would block one of
    // cpprest's client threads per response, and 48 answers arriving at once
    // would wedge the client's own pool.
    return client_->request(req).then([](web::http::http_response r) {
      const int status = r.status_code();
      return r.extract_string(true).then([status](std::string body) { return Reply{status, std::move(body)}; });
    });
  }
  Reply send(const std::string& method, const std::string& path, const json& body = nullptr,
             const std::string& token = "T0KEN") {
    return send_async(method, path, body.is_null() ? "" : body.dump(), token).get();
  }
  std::string agent_token(size_t i) {
    std::lock_guard<std::mutex> lock(backend_.mu);
    return backend_.launched.at(i).env.at("MUSTER_AGENT_TOKEN");
  }

  bool async_backend_ = false;  // backend work on the registry's threads, as in musterd
  fs::path dir_;
  service::SystemClock clock_;
  muster::testing::FakeBackend backend_;
  std::unique_ptr<service::WorkerRegistry> registry_;
  service::Router router_;
  std::unique_ptr<service::Authenticator> auth_;
  std::unique_ptr<service::HttpServer> server_;
  std::unique_ptr<web::http::client::http_client> client_;
};

// Paths and their methods from api/openapi.yaml, by a line scan: a path is
// a two-space-indented key starting with '/', its methods four-space keys.
std::set<std::string> documented_routes() {
  std::ifstream in(std::string(std::getenv("MUSTER_SOURCE_DIR")) + "/api/openapi.yaml");
  std::set<std::string> out;
  std::string line, path;
  bool in_paths = false;
  const std::regex path_re("^  (/[^:]*):\\s*$"), method_re("^    (get|post|put|delete|patch):\\s*$");
  std::smatch m;
  while (std::getline(in, line)) {
    if (line.rfind("paths:", 0) == 0) in_paths = true;
    else if (!line.empty() && line[0] != ' ') in_paths = false;
    if (!in_paths) continue;
    if (std::regex_match(line, m, path_re)) path = m[1];
    else if (std::regex_match(line, m, method_re) && !path.empty()) {
      std::string method = m[1];
      for (auto& c : method) c = static_cast<char>(std::toupper(c));
      out.insert(method + " " + path);
    }
  }
  return out;
}

TEST_F(HttpTest, EveryRouteIsInOpenApi) {
  const auto documented = documented_routes();
  ASSERT_GT(documented.size(), 5u) << "could not read api/openapi.yaml";
  ASSERT_FALSE(router_.routes().empty());
  for (const auto& r : router_.routes()) {
    EXPECT_TRUE(documented.count(r.method + " " + r.pattern)) << r.method << " " << r.pattern << " is not documented";
  }
}

TEST_F(HttpTest, ErrorsAndAuth) {
  EXPECT_EQ(send("GET", "/healthz", nullptr, "").status, 200);
  auto r = send("GET", "/api/v1/workers", nullptr, "");
  EXPECT_EQ(r.status, 401);
  EXPECT_EQ(r.j()["error"]["code"], "unauthenticated");
  EXPECT_EQ(send("GET", "/api/v1/workers", nullptr, "wrong").status, 401);
  EXPECT_EQ(send("GET", "/api/v1/nothing").status, 404);
  EXPECT_EQ(send("GET", "/api/v1/workers/nope").status, 404);
  r = send("POST", "/api/v1/workers", {{"n", 0}, {"cpu", 1}, {"memory", 1}, {"script", "train.py"}});
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(r.j()["error"]["code"], "invalid_argument");
  EXPECT_EQ(r.j()["error"]["field"], "n");
  EXPECT_FALSE(r.j()["error"]["message"].get<std::string>().empty());
  EXPECT_EQ(send_async("POST", "/api/v1/workers", "{not json").get().status, 400);
  EXPECT_EQ(send_async("POST", "/api/v1/workers", std::string("{\"n\":1,\0}", 9)).get().status, 400);
  EXPECT_EQ(send_async("POST", "/api/v1/workers", "\xff\xfe").get().status, 400);
  r = send_async("POST", "/api/v1/workers", std::string(5000, ' ')).get();
  EXPECT_EQ(r.status, 413);
  EXPECT_EQ(r.j()["error"]["code"], "payload_too_large");
  EXPECT_EQ(send("GET", "/api/v1/workers/x/logs?tail=-3").status, 400);
  EXPECT_TRUE(backend_.launched.empty());

  // Agent tokens: only their own worker, never user routes.
  r = send("POST", "/api/v1/workers", {{"n", 2}, {"cpu", 1}, {"memory", 1}, {"script", "train.py"}});
  ASSERT_EQ(r.status, 201) << r.body;
  const std::string id0 = r.j()["workers"][0]["id"], id1 = r.j()["workers"][1]["id"];
  EXPECT_EQ(send("GET", "/api/v1/workers", nullptr, agent_token(0)).status, 403);
  EXPECT_EQ(send("POST", "/api/v1/agent/workers/" + id1 + "/heartbeat", json::object(), agent_token(0)).status, 403);
  EXPECT_EQ(send("POST", "/api/v1/agent/workers/" + id0 + "/heartbeat", json::object(), "T0KEN").status, 403);
  EXPECT_EQ(send("POST", "/api/v1/agent/workers/" + id0 + "/register", {{"ip_address", "nope"}}, agent_token(0)).status,
            400);
  EXPECT_EQ(send("POST", "/api/v1/agent/workers/" + id0 + "/register", {{"ip_address", "127.0.0.1"}}, agent_token(0))
                .status,
            200);
  EXPECT_EQ(send("GET", "/api/v1/workers/" + id0).j()["status"], "running");
  EXPECT_EQ(send("GET", "/api/v1/workers/" + id0 + "/logs?tail=x").status, 400);
  EXPECT_EQ(send("GET", "/api/v1/workers/" + id0 + "/logs?tail=3").status, 200);
  r = send("POST", "/api/v1/workers/stop", {{"ids", {id0}}});
  ASSERT_EQ(r.status, 200);
  EXPECT_EQ(r.j()["workers"][0]["status"], "stopped");
  EXPECT_EQ(send("POST", "/api/v1/agent/workers/" + id0 + "/heartbeat", json::object(), agent_token(0)).status, 409);
}

TEST_F(HttpTest, ConcurrentAwaitsDoNotPinTheListener) {
  constexpr int kWorkers = 4, kAwaits = 48;  // more awaits than cpprest's pool has threads
  auto r = send("POST", "/api/v1/workers", {{"n", kWorkers}, {"cpu", 1}, {"memory", 1}, {"code", "print(1)"}});
  ASSERT_EQ(r.status, 201) << r.body;
  json ids = json::array();
  const json launched = r.j();
  for (const auto& w : launched["workers"]) ids.push_back(w["id"]);
  std::vector<pplx::task<Reply>> awaits;
  for (int i = 0; i < kAwaits; ++i) {
    awaits.push_back(send_async("POST", "/api/v1/workers/await",
                                json{{"ids", ids}, {"wait_for_completion", false}, {"timeout_seconds", 60}}.dump()));
  }
  // Wait until the registry holds every await (they are pending, not failed).
  // The listener must still answer while all of them wait.
  const auto wait_start = std::chrono::steady_clock::now();
  while (registry_->pending_awaits() < kAwaits && std::chrono::steady_clock::now() - wait_start < 20s) {
    std::this_thread::sleep_for(10ms);
  }
  ASSERT_EQ(registry_->pending_awaits(), static_cast<size_t>(kAwaits));
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(send("GET", "/healthz", nullptr, "").status, 200);
  EXPECT_EQ(send("GET", "/api/v1/workers").status, 200);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);
  for (auto& a : awaits) {
    EXPECT_FALSE(a.is_done());
    if (a.is_done()) ADD_FAILURE() << a.get().status << " " << a.get().body;
  }
  for (int i = 0; i < kWorkers; ++i) {
    const std::string id = ids[i];
    auto reg = send("POST", "/api/v1/agent/workers/" + id + "/register", {{"ip_address", "127.0.0.1"}}, agent_token(i));
    ASSERT_EQ(reg.status, 200) << reg.body;
  }
  for (auto& a : awaits) {
    Reply done = a.get();
    ASSERT_EQ(done.status, 200) << done.body;
    EXPECT_EQ(done.j()["workers"].size(), static_cast<size_t>(kWorkers));
    EXPECT_TRUE(done.j()["failures"].empty());
  }
}

// Launch does not wait for the backend: with a backend that does
// not return, POST /api/v1/workers answers at once with `scheduling`
// workers, and a GET of them is served meanwhile; once the backend returns
// they are `starting`.
class AsyncLaunchHttpTest : public HttpTest {
 protected:
  AsyncLaunchHttpTest() { async_backend_ = true; }
};

TEST_F(AsyncLaunchHttpTest, LaunchAnswersWhileTheBackendWorksAndGetsAreServed) {
  backend_.close_gate();
  auto launched = std::async(std::launch::async, [this] {
    return send("POST", "/api/v1/workers", {{"n", 3}, {"cpu", 1}, {"memory", 1}, {"script", "train.py"}});
  });
  ASSERT_EQ(launched.wait_for(5s), std::future_status::ready) << "launch waited for the backend";
  const Reply r = launched.get();
  ASSERT_EQ(r.status, 201) << r.body;
  const json body = r.j();
  ASSERT_EQ(body["workers"].size(), 3u);
  std::vector<std::string> ids;
  for (const auto& w : body["workers"]) {
    EXPECT_EQ(w["status"], "scheduling") << w;
    ids.push_back(w["id"]);
  }
  const auto deadline = std::chrono::steady_clock::now() + 5s;
  while (!backend_.launching && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(1ms);
  ASSERT_TRUE(backend_.launching);
  // The backend is still busy: reads are served.
  const Reply got = send("GET", "/api/v1/workers/" + ids[0]);
  ASSERT_EQ(got.status, 200) << got.body;
  EXPECT_EQ(got.j()["status"], "scheduling");
  EXPECT_EQ(send("GET", "/api/v1/workers").j()["workers"].size(), 3u);

  backend_.open_gate();
  registry_->wait_for_launches();
  for (const auto& id : ids) EXPECT_EQ(send("GET", "/api/v1/workers/" + id).j()["status"], "starting");
}

}  // namespace
