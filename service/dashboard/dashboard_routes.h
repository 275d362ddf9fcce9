// The dashboard's routes: the page and its files, the cookie login, the
// event stream, and GET /metrics.
//
//   GET  /                  the page (index.html); /?token=<daemon token>
//                           creates a session, sets its cookie and answers
//                           303 to "./" so the token leaves the address bar
//                           (a wrong token: the page with 401, it asks again)
//   GET  /static/{file}     the page's scripts and styles (no data)
//   POST /api/v1/session    {"token": "..."} -> cookie + {"csrf_token"}
//   GET  /api/v1/session    {"csrf_token", "auth"} for the page
//   POST /api/v1/session/logout   ends the cookie's session
//   GET  /api/v1/events     server-sent events (EventHub)
//   GET  /metrics           Prometheus text (DaemonMetrics)
//
// Every response of the page and its files carries the security headers:
// a CSP without inline scripts or styles (default-src 'self'), nosniff, no
// framing, no referrer (the token must not leak to another site). No CORS
// header is ever sent, so other origins cannot read anything.
#pragma once

#include <filesystem>
#include <string>

#include "service/dashboard/event_hub.h"
#include "service/dashboard/sessions.h"
#include "service/metrics/daemon_metrics.h"
#include "service/router.h"

namespace muster::service {

struct DashboardOptions {
  std::filesystem::path static_dir;  // index.html, app.js, ...
  std::string daemon_token;
};

// The dashboard files: `flag` when given, else <exe dir>/../share/muster/dashboard
// when it exists, else the source tree's service/dashboard/static.
std::filesystem::path find_dashboard_dir(const std::string& flag);

// Adds the security headers to `r`.
void add_page_headers(Response& r);

void register_dashboard_routes(Router& router, const DashboardOptions& options, SessionStore& sessions,
                               EventHub& events, const DaemonMetrics& metrics, DaemonMetrics::Sources sources);

}  // namespace muster::service
