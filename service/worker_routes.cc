#include "muster/service/worker_routes.h"

#include <fstream>

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

api::Result<size_t> parse_tail(const Request& req) {
  auto it = req.query.find("tail");
  if (it == req.query.end()) return size_t{0};
  // Digits only: stol alone would also take " 3" and "+3".
  const std::string& v = it->second;
  try {
    if (v.empty() || v.find_first_not_of("0123456789") != std::string::npos) throw std::invalid_argument("tail");
    return static_cast<size_t>(std::stoll(v));
  } catch (const std::exception&) {
    return api::invalid_argument("tail must be a whole number >= 0", "tail");
  }
}

Response log_response(const std::filesystem::path& path, size_t lines) {
  Response r;
  r.content_type = "text/plain; charset=utf-8";
  r.body = tail_file(path, lines);
  return r;
}

void register_worker_routes(Router& router, WorkerRegistry& registry, ValidationOptions validation) {
  router.add("GET", "/healthz", AuthKind::kNone,
             [](const Request&, Reply reply) { reply(json_response(200, {{"status", "ok"}})); });

  router.add("POST", "/api/v1/workers", AuthKind::kUser, [&registry, validation](const Request& req, Reply reply) {
    auto parsed = parse_launch_request(req.body, validation);
    if (!parsed) return reply(error_response(parsed.status()));
    LaunchBatch batch;
    batch.request = std::move(parsed).value();
    auto launched = registry.launch(batch);
    if (!launched) return reply(error_response(launched.status()));
    reply(json_response(201, {{"workers", workers_json(launched.value())}}));
  });

  router.add("GET", "/api/v1/workers", AuthKind::kUser, [&registry](const Request&, Reply reply) {
    reply(json_response(200, {{"workers", workers_json(registry.list())}}));
  });

  router.add("GET", "/api/v1/workers/{id}", AuthKind::kUser, [&registry](const Request& req, Reply reply) {
    auto w = registry.get(req.params.at("id"));
    if (!w) return reply(error_response(w.status()));
    reply(json_response(200, api::to_json(w.value())));
  });

  router.add("GET", "/api/v1/workers/{id}/logs", AuthKind::kUser, [&registry](const Request& req, Reply reply) {
    auto tail = parse_tail(req);
    if (!tail) return reply(error_response(tail.status()));
    auto path = registry.log_path(req.params.at("id"));
    if (!path) return reply(error_response(path.status()));
    reply(log_response(path.value(), tail.value()));
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
