#include "service/tls_identity.h"

#include <arpa/inet.h>
#include <unistd.h>

#include <cstdio>
#include <memory>

#include <openssl/bn.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <spdlog/spdlog.h>

#include "api/base/atomic_file.h"
#include "api/base/client_socket.h"

namespace muster::service {

namespace fs = std::filesystem;

namespace {

struct Free {
  void operator()(X509* x) const { X509_free(x); }
  void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
  void operator()(BIO* b) const { BIO_free(b); }
  void operator()(BIGNUM* n) const { BN_free(n); }
  void operator()(X509_EXTENSION* e) const { X509_EXTENSION_free(e); }
};
template <class T>
using Owned = std::unique_ptr<T, Free>;

// The last OpenSSL error, for a message.
std::string openssl_error() {
  const unsigned long e = ERR_get_error();
  if (e == 0) return "unknown OpenSSL error";
  char buf[256];
  ERR_error_string_n(e, buf, sizeof buf);
  ERR_clear_error();
  return buf;
}

bool is_ipv4(const std::string& s) {
  in_addr a{};
  return ::inet_pton(AF_INET, s.c_str(), &a) == 1;
}

Owned<X509> read_certificate(const fs::path& pem, std::string* error) {
  FILE* f = std::fopen(pem.c_str(), "r");
  if (!f) {
    *error = "cannot read " + pem.string();
    return nullptr;
  }
  Owned<X509> cert(PEM_read_X509(f, nullptr, nullptr, nullptr));
  std::fclose(f);
  if (!cert) *error = pem.string() + " holds no PEM certificate (" + openssl_error() + ")";
  return cert;
}


bool covers(X509* cert, const std::string& name) {
  if (is_ipv4(name)) return X509_check_ip_asc(cert, name.c_str(), 0) == 1;
  return X509_check_host(cert, name.c_str(), name.size(), 0, nullptr) == 1;
}

bool add_extension(X509* cert, int nid, const std::string& value) {
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, cert, cert, nullptr, nullptr, 0);
  Owned<X509_EXTENSION> ext(X509V3_EXT_conf_nid(nullptr, &ctx, nid, value.c_str()));
  return ext && X509_add_ext(cert, ext.get(), -1) == 1;
}

std::string pem_of(EVP_PKEY* key, X509* cert) {
  Owned<BIO> bio(BIO_new(BIO_s_mem()));
  if (key) PEM_write_bio_PrivateKey(bio.get(), key, nullptr, nullptr, 0, nullptr, nullptr);
  if (cert) PEM_write_bio_X509(bio.get(), cert);
  char* data = nullptr;
  const long n = BIO_get_mem_data(bio.get(), &data);
  return std::string(data, static_cast<size_t>(n));
}

// A self-signed certificate for `names` (CA:TRUE, as Kubernetes' self-signed
// serving certificates: the file is its own CA file for clients that verify
// rather than pin), written to cert/key.
api::Status make_self_signed(const fs::path& cert_file, const fs::path& key_file,
                             const std::vector<std::string>& names) {
  Owned<EVP_PKEY> key(EVP_EC_gen("P-256"));
  Owned<X509> cert(X509_new());
  Owned<BIGNUM> serial(BN_new());
  if (!key || !cert || !serial) return api::internal_error("cannot make a TLS key: " + openssl_error());
  X509_set_version(cert.get(), 2);
  BN_rand(serial.get(), 127, BN_RAND_TOP_ANY, BN_RAND_BOTTOM_ANY);
  BN_to_ASN1_INTEGER(serial.get(), X509_get_serialNumber(cert.get()));
  X509_gmtime_adj(X509_getm_notBefore(cert.get()), -3600);
  X509_gmtime_adj(X509_getm_notAfter(cert.get()), 10L * 365 * 24 * 3600);
  X509_set_pubkey(cert.get(), key.get());
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  const std::string cn = std::string("musterd on ") + host;
  X509_NAME* subject = X509_get_subject_name(cert.get());
  X509_NAME_add_entry_by_txt(subject, "CN", MBSTRING_ASC, reinterpret_cast<const unsigned char*>(cn.c_str()), -1, -1,
                             0);
  X509_set_issuer_name(cert.get(), subject);
  std::string san;
  for (const auto& n : names) san += (san.empty() ? "" : ",") + std::string(is_ipv4(n) ? "IP:" : "DNS:") + n;
  if (!add_extension(cert.get(), NID_basic_constraints, "critical,CA:TRUE") ||
      !add_extension(cert.get(), NID_key_usage, "critical,digitalSignature,keyCertSign") ||
      !add_extension(cert.get(), NID_ext_key_usage, "serverAuth") ||
      !add_extension(cert.get(), NID_subject_key_identifier, "hash") ||
      !add_extension(cert.get(), NID_authority_key_identifier, "keyid:always") ||
      !add_extension(cert.get(), NID_subject_alt_name, san)) {
    return api::internal_error("cannot make a TLS certificate for " + san + ": " + openssl_error());
  }
  if (X509_sign(cert.get(), key.get(), EVP_sha256()) == 0) {
    return api::internal_error("cannot sign the TLS certificate: " + openssl_error());
  }
  if (auto err = base::write_file_atomically(key_file, pem_of(key.get(), nullptr), {0600})) {
    return api::internal_error("cannot write " + key_file.string() + ": " + *err);
  }
  if (auto err = base::write_file_atomically(cert_file, pem_of(nullptr, cert.get()))) {
    return api::internal_error("cannot write " + cert_file.string() + ": " + *err);
  }
  return api::Status::ok();
}

}  // namespace

bool is_loopback_host(const std::string& host) {
  return host == "localhost" || host.compare(0, 4, "127.") == 0;
}

api::Result<std::string> certificate_fingerprint(const fs::path& pem) {
  std::string error;
  auto cert = read_certificate(pem, &error);
  if (!cert) return api::invalid_argument(error, "tls-cert");
  return base::certificate_fingerprint(cert.get());
}

api::Result<TlsIdentity> given_tls_identity(const fs::path& cert, const fs::path& key) {
  if (cert.empty() || key.empty()) {
    return api::invalid_argument("give both --tls-cert and --tls-key (PEM files), or neither for a self-signed one",
                                 cert.empty() ? "tls-cert" : "tls-key");
  }
  auto fingerprint = certificate_fingerprint(cert);
  if (!fingerprint) return fingerprint.status();
  std::error_code ec;
  TlsIdentity id;
  id.cert_file = fs::absolute(cert, ec);
  id.key_file = fs::absolute(key, ec);
  id.fingerprint = fingerprint.value();
  return id;
}

api::Result<TlsIdentity> self_signed_tls_identity(const fs::path& state, const std::vector<std::string>& names) {
  const fs::path dir = state / "tls";
  std::error_code ec;
  fs::create_directories(dir, ec);
  fs::permissions(dir, fs::perms::owner_all, fs::perm_options::replace, ec);
  TlsIdentity id;
  id.cert_file = dir / "musterd.crt";
  id.key_file = dir / "musterd.key";
  id.self_signed = true;
  if (fs::exists(id.cert_file, ec) && fs::exists(id.key_file, ec)) {
    std::string error;
    auto cert = read_certificate(id.cert_file, &error);
    std::string missing;
    for (const auto& n : names) {
      if (cert && !covers(cert.get(), n)) missing += (missing.empty() ? "" : ", ") + n;
    }
    if (cert && missing.empty()) {
      id.fingerprint = base::certificate_fingerprint(cert.get());
      return id;
    }
    spdlog::warn("making a new self-signed TLS certificate in {} ({}): clients that pinned the old fingerprint "
                 "must take the new one from musterd.json",
                 dir.string(), cert ? "the kept one does not name " + missing : error);
  }
  if (auto s = make_self_signed(id.cert_file, id.key_file, names); !s) return s;
  auto fingerprint = certificate_fingerprint(id.cert_file);
  if (!fingerprint) return fingerprint.status();
  id.fingerprint = fingerprint.value();
  spdlog::info("made a self-signed TLS certificate {} (SHA-256 {})", id.cert_file.string(), id.fingerprint);
  return id;
}

}  // namespace muster::service
