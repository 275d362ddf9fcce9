// The environment variables every client of musterd (muster-agent, the
// runtime's reporters and rendezvous, the SDKs) reads to verify an https://
// daemon's certificate: musterd sets the fingerprint for every worker
// (api/agent_protocol.h), and api/base/client_socket.h says how each is used.
#pragma once

#include <cctype>
#include <optional>
#include <string>

namespace muster::base {

// The SHA-256 of musterd's certificate (64 hex digits, colons allowed): pinned.
inline constexpr const char* kEnvTlsFingerprint = "MUSTER_TLS_FINGERPRINT";
// A PEM CA bundle on this host: the chain and the host name are checked.
inline constexpr const char* kEnvCaFile = "MUSTER_CA_FILE";

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
