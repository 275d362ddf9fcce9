// Sessions: the dashboard's cookie login (Jupyter's convention).
//
// Opening /?token=<daemon token> (or posting the token to
// POST /api/v1/session) creates a session: a random 32-byte id, sent to the
// browser as an HttpOnly, SameSite=Strict cookie named cookie_name() (the
// port is part of the name: cookies are not scoped by port, and two daemons
// on one host must not overwrite each other's), and a random CSRF token the
// page reads from GET /api/v1/session and sends as X-CSRF-Token on every
// state-changing request. The daemon token itself never goes into a cookie.
//
// Bounds: sessions expire `ttl` after their last use; at most
// `max_sessions` exist (the least recently used goes). In memory only: a
// restarted daemon asks for the token again. Thread-safe.
#pragma once

#include <chrono>
#include <map>
#include <mutex>
#include <optional>
#include <string>

namespace muster::service {

struct SessionOptions {
  std::string cookie_name = "muster_session";
  std::chrono::seconds ttl{7 * 24 * 3600};
  size_t max_sessions = 256;
  // The daemon serves https: the cookie is Secure (never sent over plain http).
  bool secure = false;
};

// The value of cookie `name` in a Cookie header ("a=1; b=2"), if present.
std::optional<std::string> cookie_value(const std::string& cookie_header, const std::string& name);

class SessionStore {
 public:
  explicit SessionStore(SessionOptions options = {}) : options_(std::move(options)) {}

  struct Session {
    std::string id;
    std::string csrf_token;
  };
  Session create();
  // The session's CSRF token when `id` names a live session (and refreshes it).
  std::optional<std::string> csrf_token(const std::string& id);
  void remove(const std::string& id);
  // The session named by the request's Cookie header, if live.
  std::optional<Session> from_cookie_header(const std::string& cookie_header);

  // Set-Cookie values that set and clear the session cookie.
  std::string set_cookie(const Session& s) const;
  std::string clear_cookie() const;
  const std::string& cookie_name() const { return options_.cookie_name; }

 private:
  struct Entry {
    std::string csrf_token;
    std::chrono::steady_clock::time_point last_used;
  };
  SessionOptions options_;
  std::mutex mu_;
  std::map<std::string, Entry> sessions_;
};

}  // namespace muster::service
