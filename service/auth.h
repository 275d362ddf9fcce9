// Auth: the daemon's bearer token and the per-worker agent tokens.
//
// - The daemon token is generated on first start (32 random bytes, hex) and
//   kept in <state-dir>/token with mode 0600; SDKs read it from there.
// - Every worker gets its own agent token; it authorises only the
//   /api/v1/agent/workers/{id}/... calls of that worker (403 for any other
//   worker, 403 on user routes). The registry owns the agent tokens; the
//   Authenticator asks it through a lookup function.
#pragma once

#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <string>

#include "muster/api/status.h"

namespace muster::service {

// 2*n_bytes hex characters from the OS random source.
std::string random_hex(size_t n_bytes);

// Reads <state_dir>/token, or creates it (0600) when absent.
api::Result<std::string> load_or_create_token(const std::filesystem::path& state_dir);

// Constant-time comparison.
bool tokens_equal(const std::string& a, const std::string& b);

// Who may call a route.
enum class AuthKind {
  kNone,   // /healthz
  kUser,   // the daemon token
  kAgent,  // the agent token of the worker named by {id} in the path
};

class Authenticator {
 public:
  // Returns the worker id an agent token belongs to, if any.
  using AgentLookup = std::function<std::optional<std::string>(const std::string& token)>;

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

 private:
  std::string daemon_token_;
  AgentLookup lookup_;
};

}  // namespace muster::service
