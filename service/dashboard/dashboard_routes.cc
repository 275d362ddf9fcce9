#include "service/dashboard/dashboard_routes.h"

#include <fstream>
#include <regex>
#include <sstream>

#include "service/auth.h"

#ifndef MUSTER_DASHBOARD_SOURCE_DIR
#define MUSTER_DASHBOARD_SOURCE_DIR ""
#endif

namespace fs = std::filesystem;

namespace muster::service {

using nlohmann::json;

namespace {

std::string content_type_of(const fs::path& p) {
  const auto ext = p.extension().string();
  if (ext == ".html") return "text/html; charset=utf-8";
  if (ext == ".js") return "text/javascript; charset=utf-8";
  if (ext == ".css") return "text/css; charset=utf-8";
  if (ext == ".svg") return "image/svg+xml";
  if (ext == ".png") return "image/png";
  if (ext == ".ico") return "image/x-icon";
  return "application/octet-stream";
}

std::optional<std::string> read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) return std::nullopt;
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

Response file_response(const fs::path& p, int status = 200) {
  auto body = read_file(p);
  if (!body) return error_response(api::not_found("no dashboard file " + p.filename().string()));
  Response r;
  r.http_status = status;
  r.content_type = content_type_of(p);
  r.body = std::move(*body);
  r.headers.emplace_back("Cache-Control", "no-cache");
  add_page_headers(r);
  return r;
}

std::string header(const Request& req, const std::string& name) {
  auto it = req.headers.find(name);
  return it == req.headers.end() ? "" : it->second;
}

}  // namespace

fs::path find_dashboard_dir(const std::string& flag) {
  if (!flag.empty()) return flag;
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    const fs::path installed = exe.parent_path().parent_path() / "share" / "muster" / "dashboard";
    if (fs::exists(installed / "index.html", ec)) return installed;
  }
  return MUSTER_DASHBOARD_SOURCE_DIR;
}

void add_page_headers(Response& r) {
  r.headers.emplace_back("Content-Security-Policy",
                         "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
                         "connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; "
                         "frame-ancestors 'none'");
  r.headers.emplace_back("X-Content-Type-Options", "nosniff");
  r.headers.emplace_back("X-Frame-Options", "DENY");
  r.headers.emplace_back("Referrer-Policy", "no-referrer");
}

void register_dashboard_routes(Router& router, const DashboardOptions& options, SessionStore& sessions,
                               EventHub& events, const DaemonMetrics& metrics, DaemonMetrics::Sources sources) {
  const fs::path dir = options.static_dir;
  const std::string token = options.daemon_token;

  router.add("GET", "/", AuthKind::kNone, [dir, token, &sessions](const Request& req, Reply reply) {
    auto t = req.query.find("token");
    if (t == req.query.end()) return reply(file_response(dir / "index.html"));
    if (!tokens_equal(t->second, token)) return reply(file_response(dir / "index.html", 401));
    const auto session = sessions.create();
    Response r;
    r.http_status = 303;
    r.content_type = "text/plain; charset=utf-8";
    r.body = "logged in; continue at ./\n";
    r.headers.emplace_back("Location", "./");
    r.headers.emplace_back("Set-Cookie", sessions.set_cookie(session));
    r.headers.emplace_back("Cache-Control", "no-store");
    add_page_headers(r);
    reply(r);
  });

  router.add("GET", "/static/{file}", AuthKind::kNone, [dir](const Request& req, Reply reply) {
    static const std::regex kName("[A-Za-z0-9_-][A-Za-z0-9_.-]*");
    const std::string& name = req.params.at("file");
    if (!std::regex_match(name, kName)) {
      return reply(error_response(api::invalid_argument("bad file name '" + name + "'", "file")));
    }
    reply(file_response(dir / name));
  });

  router.add("POST", "/api/v1/session", AuthKind::kNone, [token, &sessions](const Request& req, Reply reply) {
    if (!req.body.is_object() || !req.body.contains("token") || !req.body["token"].is_string()) {
      return reply(error_response(api::invalid_argument("the body must be {\"token\": \"...\"}", "token")));
    }
    if (!tokens_equal(req.body["token"].get<std::string>(), token)) {
      return reply(error_response(api::Status(api::ErrorCode::kUnauthenticated,
                                              "wrong token (musterd printed the dashboard URL with it; it is also in "
                                              "<state-dir>/token)")));
    }
    const auto session = sessions.create();
    Response r = json_response(200, {{"csrf_token", session.csrf_token}});
    r.headers.emplace_back("Set-Cookie", sessions.set_cookie(session));
    r.headers.emplace_back("Cache-Control", "no-store");
    reply(r);
  });

  router.add("GET", "/api/v1/session", AuthKind::kUser, [&sessions](const Request& req, Reply reply) {
    Response r;
    if (!header(req, "authorization").empty()) {
      r = json_response(200, {{"auth", "bearer"}, {"csrf_token", nullptr}});
    } else {
      auto s = sessions.from_cookie_header(header(req, "cookie"));
      if (!s) return reply(error_response(api::Status(api::ErrorCode::kUnauthenticated, "no session")));
      r = json_response(200, {{"auth", "cookie"}, {"csrf_token", s->csrf_token}});
    }
    r.headers.emplace_back("Cache-Control", "no-store");
    reply(r);
  });

  router.add("POST", "/api/v1/session/logout", AuthKind::kUser, [&sessions](const Request& req, Reply reply) {
    if (auto s = sessions.from_cookie_header(header(req, "cookie"))) sessions.remove(s->id);
    Response r = json_response(200, json::object());
    r.headers.emplace_back("Set-Cookie", sessions.clear_cookie());
    reply(r);
  });

  router.add("GET", "/api/v1/events", AuthKind::kUser,
             [&events](const Request&, Reply reply) { reply(events.open()); });

  router.add("GET", "/metrics", AuthKind::kUser, [&metrics, sources](const Request&, Reply reply) {
    Response r;
    r.content_type = "text/plain; version=0.0.4; charset=utf-8";
    r.body = metrics.render(sources);
    reply(r);
  });
}

}  // namespace muster::service
