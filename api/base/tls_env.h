// The environment variables every client of musterd (muster-agent, the
// runtime's reporters and rendezvous, the SDKs) reads to verify an https://
// daemon's certificate, kEnvTlsFingerprint (the SHA-256 of musterd's
// certificate, 64 hex digits, colons allowed: pinned) and kEnvCaFile (a PEM
// CA bundle on this host: the chain and the host name are checked), named
// in api/base/worker_env.h: musterd sets the fingerprint for every worker
// (api/agent_protocol.h), and api/base/client_socket.h says how each is used.
#pragma once

#include <cctype>
#include <optional>
#include <string>

#include "api/base/worker_env.h"

namespace muster::base {

// A fingerprint as written anywhere (64 hex digits, colons and case
// ignored) -> 64 lowercase hex digits, the one form compared; nullopt for
// anything else.
inline std::optional<std::string> parse_fingerprint(const std::string& text) {
  std::string out;
  for (char c : text) {
    if (c == ':') continue;
    if (!std::isxdigit(static_cast<unsigned char>(c))) return std::nullopt;
    out += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  }
  if (out.size() != 64) return std::nullopt;
  return out;
}

}  // namespace muster::base
