// Fuzz target: the REST request bodies and paths musterd parses before any
// handler acts. The first byte picks what the rest is: a JSON body for one
// route's parser (launch, await, stop, cluster create), or "METHOD path" for
// Router::match over the route table of api/openapi.yaml.
//
// Contract checked: the parsers return a Result (never throw, never crash);
// a rejected body carries a message naming what was wrong; match() either
// finds a route whose pattern fits or returns not_found / method_not_allowed.
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "api/cluster.h"
#include "service/router.h"
#include "service/validation.h"

namespace {

using muster::service::Router;

// The routes of api/openapi.yaml (method, pattern); handlers are not called.
const char* const kRoutes[][2] = {
    {"GET", "/healthz"},
    {"GET", "/api/v1/workers"},
    {"POST", "/api/v1/workers"},
    {"GET", "/api/v1/workers/{id}"},
    {"GET", "/api/v1/workers/{id}/logs"},
    {"POST", "/api/v1/workers/await"},
    {"POST", "/api/v1/workers/stop"},
    {"POST", "/api/v1/agent/workers/{id}/register"},
    {"POST", "/api/v1/agent/workers/{id}/heartbeat"},
    {"POST", "/api/v1/agent/workers/{id}/exit"},
    {"POST", "/api/v1/agent/workers/{id}/wait-release"},
    {"GET", "/api/v1/clusters"},
    {"POST", "/api/v1/clusters"},
    {"GET", "/api/v1/clusters/{id}"},
    {"GET", "/api/v1/clusters/{id}/logs"},
    {"POST", "/api/v1/clusters/{id}/stop"},
    {"POST", "/api/v1/clusters/await"},
};

struct World {
  Router router;
  muster::service::ValidationOptions validation;
  World() {
    for (const auto& r : kRoutes) router.add(r[0], r[1], muster::service::AuthKind::kUser, nullptr);
    // A project directory with one script, so script resolution takes its real paths.
    char tmpl[] = "/tmp/muster-fuzz-project-XXXXXX";
    const char* dir = mkdtemp(tmpl);
    if (dir == nullptr) std::abort();
    validation.project_dir = std::filesystem::canonical(dir);
    std::ofstream(validation.project_dir / "train.py") << "print('hi')\n";
    std::filesystem::create_directories(validation.project_dir / "sub");
    std::ofstream(validation.project_dir / "sub" / "run.sh") << "#!/bin/sh\n";
    validation.max_workers = 64;
  }
  ~World() {
    std::error_code ec;
    std::filesystem::remove_all(validation.project_dir, ec);
  }
};

World& world() {
  static World w;
  return w;
}

void check(bool ok, const std::string& message) {
  if (!ok && message.empty()) std::abort();  // an error must say what was wrong
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  World& w = world();
  const std::string rest(reinterpret_cast<const char*>(data + 1), size - 1);
  const int kind = data[0] % 5;
  if (kind == 4) {  // "METHOD path"
    const auto space = rest.find(' ');
    const std::string method = space == std::string::npos ? rest : rest.substr(0, space);
    const std::string path = space == std::string::npos ? "" : rest.substr(space + 1);
    auto m = w.router.match(method, path);
    if (m) {
      if (m.value().route == nullptr || m.value().route->method != method) std::abort();
    } else {
      check(false, m.status().message());
    }
    return 0;
  }
  // The daemon parses bodies this way (no exceptions) before validating.
  nlohmann::json body = nlohmann::json::parse(rest, nullptr, /*allow_exceptions=*/false);
  if (body.is_discarded()) return 0;
  switch (kind) {
    case 0: {
      auto r = muster::service::parse_launch_request(body, w.validation);
      check(r.is_ok(), r.is_ok() ? "" : r.status().message());
      if (r.is_ok()) {  // what was accepted is what was sent, in range
        const auto& q = r.value();
        if (q.n < 1 || q.n > w.validation.max_workers || q.n != body.at("n").get<int64_t>()) std::abort();
        if (q.nvidia_gpu < 0) std::abort();
        if (body.contains("nvidia_gpu") && body.at("nvidia_gpu").get<int64_t>() != q.nvidia_gpu) std::abort();
      }
      break;
    }
    case 1: {
      auto r = muster::service::parse_await_request(body);
      check(r.is_ok(), r.is_ok() ? "" : r.status().message());
      break;
    }
    case 2: {
      auto r = muster::service::parse_stop_request(body);
      check(r.is_ok(), r.is_ok() ? "" : r.status().message());
      break;
    }
    case 3: {
      auto r = muster::api::parse_cluster_request(body, w.validation.max_workers);
      check(r.is_ok(), r.is_ok() ? "" : r.status().message());
      break;
    }
  }
  return 0;
}
