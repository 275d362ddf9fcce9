#include "service/worker_routes.h"

#include <algorithm>
#include <fstream>
#include <limits>

#include "api/base/settings.h"

#include "service/log_reader.h"

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

std::string tail_file(const std::filesystem::path& path, size_t lines) {
  constexpr std::streamoff kMaxBytes = 1 << 20;
  std::ifstream in(path, std::ios::binary);
  if (!in) return "";
  in.seekg(0, std::ios::end);
  const std::streamoff size = in.tellg();
  const std::streamoff start = size > kMaxBytes ? size - kMaxBytes : 0;
  in.seekg(start);
  std::string text(static_cast<size_t>(size - start), '\0');
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  if (lines == 0) return text;
  size_t pos = text.size();
  if (pos > 0 && text[pos - 1] == '\n') --pos;  // the final newline ends the last line
  for (size_t n = 0; n < lines; ++n) {
    const size_t nl = pos == 0 ? std::string::npos : text.rfind('\n', pos - 1);
    if (nl == std::string::npos) return text;
    pos = nl;
  }
  return text.substr(pos + 1);
}

namespace {

// Bytes [from, to) of `path` ("" for a file that is not there).
std::string read_range(const std::filesystem::path& path, uint64_t from, uint64_t to) {
  if (to <= from) return "";
  std::ifstream in(path, std::ios::binary);
  if (!in) return "";
  std::string text(static_cast<size_t>(to - from), '\0');
  in.seekg(static_cast<std::streamoff>(from));
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  text.resize(static_cast<size_t>(std::max<std::streamsize>(in.gcount(), 0)));
  return text;
}

}  // namespace

void serve_log(const Request& req, const Reply& reply, LogFollower* follower,
               const std::function<api::Result<std::filesystem::path>()>& resolve, std::function<bool()> finished) {
  auto query = parse_log_query(req);
  if (!query) return reply(error_response(query.status()));
  auto found = resolve();
  if (!found) return reply(error_response(found.status()));
  const std::filesystem::path& path = found.value();
  const LogStart start = plan_log_start(path, query.value());
  const bool stream = query->follow || (query->from_start && follower);
  if (!stream) {
    // A tail (at most kMaxTailBytes), or a whole file where nothing streams.
    Response r;
    r.content_type = "text/plain; charset=utf-8";
    r.headers.emplace_back("X-Log-Offset", std::to_string(start.offset));
    r.headers.emplace_back("X-Log-Marker-Bytes", std::to_string(start.marker.size()));
    r.body = start.marker + read_range(path, start.file_pos, start.file_size);
    return reply(std::move(r));
  }
  if (!follower) return reply(error_response(api::unavailable("this server does not stream logs (follow=true)")));
  auto slot = follower->reserve();
  if (!slot) return reply(error_response(slot.status()));
  if (!query->follow) {
    // from_start without follow: the file as it is now, streamed.
    const uint64_t end = start.offset + (start.file_size - start.file_pos);
    return reply(follow_response(*follower, std::move(slot).value(), path, start.offset, [] { return true; },
                                 start.marker, end));
  }
  reply(follow_response(*follower, std::move(slot).value(), path, start.offset, std::move(finished), start.marker));
}

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
