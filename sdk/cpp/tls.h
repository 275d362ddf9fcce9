// How the C++ SDK's cpprest clients verify an https:// musterd (config.h
// says where the settings come from): the CA file as cpprest's trust store
// with the host checked, the pinned SHA-256 in place of the chain check
// (OpenSSL's cert_verify_callback: the handshake fails before any request
// is sent), or both. Internal to the SDK's .cc files.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include <cpprest/http_client.h>

#include "sdk/cpp/config.h"
#include "sdk/cpp/error.h"

namespace muster::sdk {

// What the last handshake saw, to say why it failed.
struct TlsSeen {
  std::string fingerprint;  // the peer certificate's SHA-256, "" before a handshake
};

// Sets `config` up for endpoint's TLS settings (nothing for http://).
std::shared_ptr<TlsSeen> verify_tls(web::http::client::http_client_config& config, const Endpoint& endpoint);

// The MusterError("untrusted_certificate") for a request that failed with
// `what`, when it failed because of the certificate; else nullopt.
std::optional<MusterError> certificate_refused(const Endpoint& endpoint, const TlsSeen* seen, const std::string& what);

}  // namespace muster::sdk
