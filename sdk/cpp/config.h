// Finding musterd: URL and token, each separately, in this order:
//   1. explicit values (ClientOptions), 2. MUSTER_URL / MUSTER_TOKEN,
//   3. the state directory ($MUSTER_STATE_DIR, else $HOME/.muster):
//      <state>/musterd.json {"url": ...} and <state>/token (both written by musterd).
// An https:// daemon's certificate is verified as the Python SDK's muster.tls
// says, in the same order: ClientOptions' ca_file/tls_fingerprint, then
// MUSTER_CA_FILE / MUSTER_TLS_FINGERPRINT, then musterd.json's
// tls.fingerprint when it names the same URL, else the system's CAs.
#pragma once

#include <string>

namespace muster::sdk {

struct Endpoint {
  std::string url;    // "http://127.0.0.1:7878", no trailing slash
  std::string token;
  // https only: a PEM CA file and/or the pinned SHA-256 of the certificate
  // (64 lowercase hex digits); neither: the system's CAs.
  std::string ca_file{};
  std::string tls_fingerprint{};
  std::string tls_source{};  // where they came from, for errors
};

// The state directory as above.
std::string state_dir();

// Fills what `given` leaves empty; throws MusterError("unconfigured") naming
// what is missing and where it looked.
Endpoint discover(Endpoint given = {});

}  // namespace muster::sdk
