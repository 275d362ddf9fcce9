// The environment variables every client of musterd (muster-agent, the
// runtime's reporters and rendezvous, the SDKs) reads to verify an https://
// daemon's certificate: musterd sets the fingerprint for every worker
// (api/agent_protocol.h), and api/base/client_socket.h says how each is used.
#pragma once

namespace muster::base {

// The SHA-256 of musterd's certificate (64 hex digits, colons allowed): pinned.
inline constexpr const char* kEnvTlsFingerprint = "MUSTER_TLS_FINGERPRINT";
// A PEM CA bundle on this host: the chain and the host name are checked.
inline constexpr const char* kEnvCaFile = "MUSTER_CA_FILE";

}  // namespace muster::base
