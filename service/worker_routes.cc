#include "service/worker_routes.h"

#include <algorithm>
#include <fstream>
#include <limits>

#include "api/base/settings.h"

#include "service/log_route.h"

namespace muster::service {

using nlohmann::json;

namespace {

constexpr size_t kFailureLogLines = 20;

json workers_json(const std::vector<api::Worker>& workers) {
  json out = json::array();
  for (const auto& w : workers) out.push_back(api::to_json(w));
  return out;
}

}  // namespace

void register_worker_routes(Router& router, WorkerRegistry& registry, ValidationOptions validation,
                            LogFollower* follower, const StoreHealth* health) {
  // Up (200) either way; "degraded" while the state database refuses writes.
  router.add("GET", "/healthz", AuthKind::kNone, [health](const Request&, Reply reply) {
    const auto problem = health ? health->problem() : std::nullopt;
    if (!problem) return reply(json_response(200, {{"status", "ok"}}));
    reply(json_response(200, {{"status", "degraded"}, {"problems", json::array({"state database: " + *problem})}}));
  });

  router.add("POST", "/api/v1/workers", AuthKind::kUser, [&registry, validation](const Request& req, Reply reply) {
    auto parsed = parse_launch_request(req.body, validation);
    if (!parsed) return reply(error_response(parsed.status()));
    LaunchBatch batch;
    batch.request = std::move(parsed).value();
    std::vector<std::string> warnings = batch.request.warnings;
    auto launched = registry.launch(batch, &warnings);  // + admission's (the host overcommitted, or waiting)
    if (!launched) return reply(error_response(launched.status()));
    json body = {{"workers", workers_json(launched.value())}};
    if (!warnings.empty()) body["warnings"] = warnings;
    reply(json_response(201, body));
  });

  router.add("GET", "/api/v1/workers", AuthKind::kUser, [&registry](const Request& req, Reply reply) {
    const auto query = base::Settings::of(req.query, "query parameter");
    const auto limit = query.integer("limit", kMaxPageSize, 1, kMaxPageSize);
    if (!limit.ok()) return reply(error_response(api::invalid_argument(limit.error, "limit")));
    const auto token = query.integer("page_token", 0, 0, std::numeric_limits<long long>::max());
    if (!token.ok()) {
      return reply(error_response(api::invalid_argument(token.error + " (a next_page_token of an earlier page)",
                                                        "page_token")));
    }
    if (const auto unknown = query.unread(); !unknown.empty()) {
      return reply(error_response(
          api::invalid_argument("unknown query parameter '" + unknown.front() + "' (known: limit, page_token)",
                                unknown.front())));
    }
    const auto page = registry.page(static_cast<uint64_t>(token.value), static_cast<size_t>(limit.value));
    std::string body = "{\"workers\":[";
    for (size_t i = 0; i < page.workers.size(); ++i) {
      if (i) body += ',';
      body += api::to_json(page.workers[i]).dump(-1, ' ', false, json::error_handler_t::replace);
    }
    body += ']';
    if (page.next) body += ",\"next_page_token\":\"" + std::to_string(*page.next) + "\"";
    body += '}';
    Response r;
    r.body = std::move(body);
    reply(std::move(r));
  });

  router.add("DELETE", "/api/v1/workers/{id}", AuthKind::kUser, [&registry](const Request& req, Reply reply) {
    if (auto s = registry.remove(req.params.at("id")); !s) return reply(error_response(s));
    Response r;
    r.http_status = 204;
    reply(std::move(r));
  });

  router.add("GET", "/api/v1/workers/{id}", AuthKind::kUser, [&registry](const Request& req, Reply reply) {
    auto w = registry.get(req.params.at("id"));
    if (!w) return reply(error_response(w.status()));
    reply(json_response(200, api::to_json(w.value())));
  });

  router.add("GET", "/api/v1/workers/{id}/logs", AuthKind::kUser,
             [&registry, follower](const Request& req, Reply reply) {
               const std::string id = req.params.at("id");
               serve_log(req, reply, follower, [&registry, &id] { return registry.log_path(id); }, [&registry, id] {
                 auto w = registry.get(id);
                 return !w || api::is_terminal(w->status);
               });
             });

  router.add("POST", "/api/v1/workers/await", AuthKind::kUser, [&registry](const Request& req, Reply reply) {
    auto parsed = parse_await_request(req.body.is_null() ? json::object() : req.body);
    if (!parsed) return reply(error_response(parsed.status()));
    auto status = registry.await_workers(parsed.value(), [&registry, reply](AwaitResult result) {
      json failures = json::array();
      for (const auto& w : result.failures) {
        json f = api::to_json(w);
        if (auto path = registry.log_path(w.id)) f["log_tail"] = tail_file(path.value(), kFailureLogLines);
        failures.push_back(std::move(f));
      }
      reply(json_response(200, {{"workers", workers_json(result.workers)}, {"failures", failures}}));
    });
    if (!status) reply(error_response(status));
  });

  router.add("POST", "/api/v1/workers/stop", AuthKind::kUser, [&registry](const Request& req, Reply reply) {
    auto parsed = parse_stop_request(req.body);
    if (!parsed) return reply(error_response(parsed.status()));
    auto stopped = registry.stop(parsed->ids);
    if (!stopped) return reply(error_response(stopped.status()));
    reply(json_response(200, {{"workers", workers_json(stopped.value())}}));
  });
}

}  // namespace muster::service
