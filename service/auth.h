// Auth: the daemon's bearer token and the per-worker agent tokens.
//
// - The daemon token is generated on first start (32 random bytes, hex) and
//   kept in <state-dir>/token with mode 0600; SDKs read it from there.
// - Every worker gets its own agent token; it authorises only the
//   /api/v1/agent/workers/{id}/... calls of that worker (403 for any other
//   worker, 403 on user routes). The registry owns the agent tokens; the
//   Authenticator asks it through a lookup function.
// - User routes also accept the dashboard's session cookie (see
//   service/dashboard/sessions.h) once set_sessions() was called: a GET or
//   HEAD needs only the cookie; any other method authenticated by the cookie
//   must carry the session's CSRF token in X-CSRF-Token (403 otherwise). A
//   request with an Authorization header is judged by it alone, so bearer
//   clients never need a CSRF token. Agent routes never accept the cookie.
#pragma once

#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <string>

#include "api/status.h"

namespace muster::service {

// Reads <state_dir>/token, or creates it (0600) when absent.
api::Result<std::string> load_or_create_token(const std::filesystem::path& state_dir);

// Constant-time comparison.
bool tokens_equal(const std::string& a, const std::string& b);

// Who may call a route.
enum class AuthKind {
  kNone,   // /healthz
  kUser,   // the daemon token
  kAgent,  // the agent token of the worker named by {id} in the path
  kReport,  // kAgent, or the metrics token of that worker (training metrics)
};

// A worker's metrics token: HMAC-SHA256(daemon token, "metrics:" + id), hex.
// The agent keeps its own token from the script it runs; the script gets
// this one (MUSTER_METRICS_TOKEN), which authorises nothing but
// POST /api/v1/agent/workers/{id}/metrics for that worker.
std::string metrics_token(const std::string& daemon_token, const std::string& worker_id);

class Authenticator {
 public:
  // Returns the worker id an agent token belongs to, if any.
  using AgentLookup = std::function<std::optional<std::string>(const std::string& token)>;
  // Returns the CSRF token of the session named by a Cookie header, if live.
  using SessionLookup = std::function<std::optional<std::string>(const std::string& cookie_header)>;

  Authenticator(std::string daemon_token, AgentLookup lookup)
      : daemon_token_(std::move(daemon_token)), lookup_(std::move(lookup)) {}

  // `authorization` is the raw Authorization header ("" when absent);
  // `worker_id` is the {id} of the path for agent routes.
  api::Status check(AuthKind kind, const std::string& authorization, const std::string& worker_id) const;
  // The same, from the request's headers (names lower-case): what the HTTP
  // server calls, so that other credentials (a session cookie) can be
  // checked here too. `method` is the request's ("GET", "POST").
  api::Status check(AuthKind kind, const std::map<std::string, std::string>& headers, const std::string& method,
                    const std::string& worker_id) const;

  // Enables the session cookie on user routes; call before serving.
  void set_sessions(SessionLookup sessions) { sessions_ = std::move(sessions); }

 private:
  SessionLookup sessions_;
  std::string daemon_token_;
  AgentLookup lookup_;
};

}  // namespace muster::service
