#include "service/router.h"


namespace muster::service {

namespace {
std::vector<std::string> split_path(const std::string& path) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= path.size()) {
    size_t end = path.find('/', start);
    if (end == std::string::npos) end = path.size();
    if (end > start) out.emplace_back(path, start, end - start);
    start = end + 1;
  }
  return out;
}

bool is_param(const std::string& seg) { return seg.size() > 2 && seg.front() == '{' && seg.back() == '}'; }
}  // namespace

int http_status_of(api::ErrorCode code) {
  switch (code) {
    case api::ErrorCode::kOk: return 200;
    case api::ErrorCode::kInvalidArgument: return 400;
    case api::ErrorCode::kUnauthenticated: return 401;
    case api::ErrorCode::kPermissionDenied: return 403;
    case api::ErrorCode::kNotFound: return 404;
    case api::ErrorCode::kConflict: return 409;
    case api::ErrorCode::kPayloadTooLarge: return 413;
    case api::ErrorCode::kUnavailable: return 503;
    case api::ErrorCode::kDeadlineExceeded: return 504;
    case api::ErrorCode::kInternal: return 500;
  }
  return 500;
}

Response error_response(const api::Status& status) {
  nlohmann::json err = {{"code", api::error_code_name(status.code())}, {"message", status.message()}};
  if (!status.field().empty()) err["field"] = status.field();
  return json_response(http_status_of(status.code()), {{"error", err}});
}

Response json_response(int http_status, const nlohmann::json& body) {
  Response r;
  r.http_status = http_status;
  r.body = body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  return r;
}

void Router::add(std::string method, std::string pattern, AuthKind auth, Handler handler) {
  const Lane lane = auth == AuthKind::kAgent ? Lane::kAgent : Lane::kUser;
  add_route(std::move(method), std::move(pattern), auth, std::move(handler), lane);
}

void Router::add_inline(std::string method, std::string pattern, AuthKind auth, Handler handler) {
  add_route(std::move(method), std::move(pattern), auth, std::move(handler), Lane::kInline);
}

void Router::add_route(std::string method, std::string pattern, AuthKind auth, Handler handler, Lane lane) {
  auto segments = split_path(pattern);
  routes_.push_back(Route{std::move(method), std::move(pattern), auth, std::move(handler), lane, std::move(segments)});
}

api::Result<Router::Match> Router::match(const std::string& method, const std::string& path) const {
  const auto segs = split_path(path);
  const Route* best = nullptr;
  int best_literals = -1;
  std::map<std::string, std::string> best_params;
  for (const auto& route : routes_) {
    if (route.method != method) continue;
    const auto& pat = route.segments;
    if (pat.size() != segs.size()) continue;
    std::map<std::string, std::string> params;
    int literals = 0;
    bool ok = true;
    for (size_t i = 0; i < pat.size() && ok; ++i) {
      if (is_param(pat[i])) {
        params[pat[i].substr(1, pat[i].size() - 2)] = segs[i];
      } else if (pat[i] == segs[i]) {
        ++literals;
      } else {
        ok = false;
      }
    }
    if (ok && literals > best_literals) {
      best = &route;
      best_literals = literals;
      best_params = std::move(params);
    }
  }
  if (!best) return api::not_found("no route " + method + " " + path + " (see api/openapi.yaml)");
  return Match{best, std::move(best_params)};
}

}  // namespace muster::service
