#include "sdk/cpp/tls.h"

#include <openssl/evp.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

namespace muster::sdk {

namespace {

struct Pin {
  std::string fingerprint;  // expected
  bool check_chain = false;  // a CA file too
  std::shared_ptr<TlsSeen> seen;
};

// The SDK links nothing of muster's own (it installs alone, beside a
// notebook's program), so it keeps its copy of base::certificate_fingerprint
// (api/base/client_socket.h): the same digest and the same spelling.
std::string sha256_of(X509* cert) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  if (!cert || X509_digest(cert, EVP_sha256(), md, &n) != 1) return "";
  static const char* kHex = "0123456789abcdef";
  std::string out;
  for (unsigned int i = 0; i < n; ++i) {
    out += kHex[md[i] >> 4];
    out += kHex[md[i] & 15];
  }
  return out;
}

// OpenSSL's whole-chain check, replaced: the leaf's SHA-256 against the pin
// (then the chain, when a CA file is given too).
int check_pin(X509_STORE_CTX* store, void* arg) {
  const auto* pin = static_cast<const Pin*>(arg);
  pin->seen->fingerprint = sha256_of(X509_STORE_CTX_get0_cert(store));
  if (pin->seen->fingerprint != pin->fingerprint) {
    X509_STORE_CTX_set_error(store, X509_V_ERR_CERT_REJECTED);
    return 0;
  }
  return pin->check_chain ? X509_verify_cert(store) : 1;
}

}  // namespace

std::shared_ptr<TlsSeen> verify_tls(web::http::client::http_client_config& config, const Endpoint& endpoint) {
  if (endpoint.url.compare(0, 8, "https://") != 0) return nullptr;
  auto seen = std::make_shared<TlsSeen>();
  config.set_validate_certificates(true);
  std::shared_ptr<Pin> pin;
  if (!endpoint.tls_fingerprint.empty()) {
    pin = std::make_shared<Pin>(Pin{endpoint.tls_fingerprint, !endpoint.ca_file.empty(), seen});
  }
  const std::string ca_file = endpoint.ca_file;
  // The callback (and the Pin it hands OpenSSL) lives in the config, which
  // every http_client made from it copies.
  config.set_ssl_context_callback([ca_file, pin](boost::asio::ssl::context& ctx) {
    if (!ca_file.empty()) ctx.load_verify_file(ca_file);
    if (pin) SSL_CTX_set_cert_verify_callback(ctx.native_handle(), check_pin, pin.get());
  });
  return seen;
}

std::optional<MusterError> certificate_refused(const Endpoint& endpoint, const TlsSeen* seen, const std::string& what) {
  if (!seen) return std::nullopt;
  if (!endpoint.tls_fingerprint.empty() && !seen->fingerprint.empty() && seen->fingerprint != endpoint.tls_fingerprint) {
    return MusterError("untrusted_certificate", "the certificate of " + endpoint.url + " has SHA-256 fingerprint " +
                                                    seen->fingerprint + ", not the pinned " +
                                                    endpoint.tls_fingerprint + " (from " + endpoint.tls_source +
                                                    "): not this musterd, or one with another certificate; " +
                                                    "nothing was sent");
  }
  if (what.find("certificate") != std::string::npos) {
    return MusterError("untrusted_certificate", "the certificate of " + endpoint.url + " is not trusted by " +
                                                    (endpoint.ca_file.empty() ? endpoint.tls_source
                                                                              : "the CA file " + endpoint.ca_file) +
                                                    ": " + what);
  }
  return std::nullopt;
}

}  // namespace muster::sdk
