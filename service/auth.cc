#include "service/auth.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <system_error>

#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "api/base/atomic_file.h"
#include "service/random_hex.h"

namespace muster::service {

api::Result<std::string> load_or_create_token(const std::filesystem::path& state_dir) {
  const auto path = state_dir / "token";
  std::error_code ec;
  if (std::filesystem::exists(path, ec)) {
    std::ifstream in(path);
    std::string token;
    std::getline(in, token);
    if (token.size() >= 32) return token;
    return api::internal_error("token file " + path.string() + " is empty or too short; delete it to regenerate");
  }
  std::string token = random_hex(32);
  // Durable (a daemon restarted after a power cut must find the token its
  // clients hold) and never readable by others, not even half-written.
  if (auto err = base::write_file_atomically(path, token + "\n", {0600})) {
    return api::internal_error("cannot write the token file: " + *err);
  }
  return token;
}

std::string metrics_token(const std::string& daemon_token, const std::string& worker_id) {
  const std::string message = "metrics:" + worker_id;
  unsigned char mac[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  HMAC(EVP_sha256(), daemon_token.data(), static_cast<int>(daemon_token.size()),
       reinterpret_cast<const unsigned char*>(message.data()), message.size(), mac, &len);
  static const char* kHex = "0123456789abcdef";
  std::string out;
  for (unsigned int i = 0; i < len; ++i) {
    out.push_back(kHex[mac[i] >> 4]);
    out.push_back(kHex[mac[i] & 15]);
  }
  return out;
}

bool tokens_equal(const std::string& a, const std::string& b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

api::Status Authenticator::check(AuthKind kind, const std::string& authorization,
                                 const std::string& worker_id) const {
  if (kind == AuthKind::kNone) return api::Status::ok();
  static const std::string kPrefix = "Bearer ";
  if (authorization.compare(0, kPrefix.size(), kPrefix) != 0) {
    return api::Status(api::ErrorCode::kUnauthenticated,
                       "missing 'Authorization: Bearer <token>' header (the token is in <state-dir>/token)");
  }
  const std::string token = authorization.substr(kPrefix.size());
  if (kind == AuthKind::kReport && !worker_id.empty() && tokens_equal(token, metrics_token(daemon_token_, worker_id))) {
    return api::Status::ok();
  }
  const bool is_daemon = tokens_equal(token, daemon_token_);
  const auto agent_worker = is_daemon ? std::nullopt : lookup_(token);
  if (!is_daemon && !agent_worker) {
    return api::Status(api::ErrorCode::kUnauthenticated, "unknown bearer token");
  }
  if (kind == AuthKind::kUser) {
    if (is_daemon) return api::Status::ok();
    return api::Status(api::ErrorCode::kPermissionDenied, "an agent token may only call /api/v1/agent/ routes");
  }
  // kAgent
  if (agent_worker && *agent_worker == worker_id) return api::Status::ok();
  return api::Status(api::ErrorCode::kPermissionDenied,
                     "this token may not act for worker '" + worker_id + "'");
}

api::Status Authenticator::check(AuthKind kind, const std::map<std::string, std::string>& headers,
                                 const std::string& method, const std::string& worker_id) const {
  const auto it = headers.find("authorization");
  const auto cookie = headers.find("cookie");
  if (it == headers.end() && kind == AuthKind::kUser && sessions_ && cookie != headers.end()) {
    if (auto csrf = sessions_(cookie->second)) {
      if (method == "GET" || method == "HEAD") return api::Status::ok();
      const auto sent = headers.find("x-csrf-token");
      if (sent != headers.end() && tokens_equal(sent->second, *csrf)) return api::Status::ok();
      return api::Status(api::ErrorCode::kPermissionDenied,
                         "a request authenticated by the session cookie must carry the session's X-CSRF-Token "
                         "header (GET /api/v1/session returns it)");
    }
  }
  return check(kind, it == headers.end() ? std::string() : it->second, worker_id);
}

}  // namespace muster::service
