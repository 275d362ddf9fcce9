// TlsIdentity: the certificate musterd serves HTTPS with, and what clients
// pin it by.
//
// musterd serves TLS whenever it listens beyond loopback (service/daemon.h,
// step 3). The certificate is --tls-cert/--tls-key when given; otherwise one
// made at the first start in <state>/tls/ (self-signed, EC P-256, ten
// years) and kept across restarts, so a client that pinned its fingerprint
// keeps working. musterd.json names the certificate and its fingerprint,
// and the daemon hands the fingerprint to every agent (MUSTER_TLS_FINGERPRINT,
// api/base/tls_client.h), which pins it.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "api/status.h"

namespace muster::service {

struct TlsIdentity {
  std::filesystem::path cert_file;  // PEM: the certificate, then any intermediates
  std::filesystem::path key_file;   // PEM
  std::string fingerprint;          // SHA-256 of the certificate (DER), 64 lowercase hex digits
  bool self_signed = false;         // made by musterd
};

// --tls-cert/--tls-key: both readable, the key the certificate's.
api::Result<TlsIdentity> given_tls_identity(const std::filesystem::path& cert, const std::filesystem::path& key);

// <state>/tls/musterd.crt and musterd.key (0600): made when absent, kept
// otherwise. `names` (IPv4 addresses and host names) go into the
// certificate's subjectAltName; a kept certificate that lacks one of them is
// made again, with a warning that its fingerprint changed.
api::Result<TlsIdentity> self_signed_tls_identity(const std::filesystem::path& state,
                                                  const std::vector<std::string>& names);

// The SHA-256 fingerprint of the first certificate in a PEM file.
api::Result<std::string> certificate_fingerprint(const std::filesystem::path& pem);

// 127.0.0.0/8 and "localhost": where plain HTTP is allowed without
// --insecure-http.
bool is_loopback_host(const std::string& host);

}  // namespace muster::service
