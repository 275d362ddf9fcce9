#include "service/dashboard/sessions.h"

#include "service/random_hex.h"

namespace muster::service {

std::optional<std::string> cookie_value(const std::string& header, const std::string& name) {
  size_t pos = 0;
  while (pos < header.size()) {
    size_t end = header.find(';', pos);
    if (end == std::string::npos) end = header.size();
    std::string part = header.substr(pos, end - pos);
    const size_t first = part.find_first_not_of(' ');
    part = first == std::string::npos ? "" : part.substr(first);
    const size_t eq = part.find('=');
    if (eq != std::string::npos && part.compare(0, eq, name) == 0 && eq == name.size()) {
      std::string value = part.substr(eq + 1);
      while (!value.empty() && value.back() == ' ') value.pop_back();
      return value;
    }
    pos = end + 1;
  }
  return std::nullopt;
}

SessionStore::Session SessionStore::create() {
  Session s{random_hex(32), random_hex(32)};
  const auto now = std::chrono::steady_clock::now();
  std::lock_guard<std::mutex> lock(mu_);
  for (auto it = sessions_.begin(); it != sessions_.end();) {
    it = now - it->second.last_used > options_.ttl ? sessions_.erase(it) : std::next(it);
  }
  if (sessions_.size() >= options_.max_sessions) {
    auto oldest = sessions_.begin();
    for (auto it = sessions_.begin(); it != sessions_.end(); ++it) {
      if (it->second.last_used < oldest->second.last_used) oldest = it;
    }
    sessions_.erase(oldest);
  }
  sessions_[s.id] = Entry{s.csrf_token, now};
  return s;
}

std::optional<std::string> SessionStore::csrf_token(const std::string& id) {
  const auto now = std::chrono::steady_clock::now();
  std::lock_guard<std::mutex> lock(mu_);
  auto it = sessions_.find(id);
  if (it == sessions_.end()) return std::nullopt;
  if (now - it->second.last_used > options_.ttl) {
    sessions_.erase(it);
    return std::nullopt;
  }
  it->second.last_used = now;
  return it->second.csrf_token;
}

void SessionStore::remove(const std::string& id) {
  std::lock_guard<std::mutex> lock(mu_);
  sessions_.erase(id);
}

std::optional<SessionStore::Session> SessionStore::from_cookie_header(const std::string& header) {
  auto id = cookie_value(header, options_.cookie_name);
  if (!id || id->empty()) return std::nullopt;
  auto csrf = csrf_token(*id);
  if (!csrf) return std::nullopt;
  return Session{*id, *csrf};
}

std::string SessionStore::set_cookie(const Session& s) const {
  return options_.cookie_name + "=" + s.id + "; Path=/; HttpOnly; SameSite=Strict" +
         (options_.secure ? "; Secure" : "") + "; Max-Age=" + std::to_string(options_.ttl.count());
}

std::string SessionStore::clear_cookie() const {
  return options_.cookie_name + "=; Path=/; HttpOnly; SameSite=Strict" + (options_.secure ? "; Secure" : "") +
         "; Max-Age=0";
}

}  // namespace muster::service
