// ClientSocket: a blocking-with-deadline TCP connection to musterd, plain or
// TLS, for the small hand-written HTTP clients (muster-agent's
// workers/agent/http_client.h, the runtime's runtime/report/http_post.h).
//
// TLS is verified, never skipped: a pinned SHA-256 fingerprint of the
// server's certificate (MUSTER_TLS_FINGERPRINT, what musterd gives every
// agent: it needs no file on the worker's host, a container or a pod), a CA
// file (MUSTER_CA_FILE, with the host name or address checked against the
// certificate), both (each must pass), or, with neither, the system's CAs.
// A certificate that fails is an error naming what was expected and what
// was found; nothing falls back to plain TCP.
//
// Threads: one caller at a time per socket. The socket is non-blocking;
// every call waits with poll() up to its deadline (steady clock).
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "api/base/tls_env.h"

struct x509_st;  // OpenSSL's X509

namespace muster::base {

struct TlsVerify {
  std::string fingerprint{};  // 64 lowercase hex digits (parse_fingerprint); "" = not pinned
  std::string ca_file{};      // PEM; "" = none
};

// MUSTER_TLS_FINGERPRINT and MUSTER_CA_FILE from `env`; "" or an error
// naming the variable.
std::string tls_verify_from_env(const std::map<std::string, std::string>& env, TlsVerify* out);
// The same from this process's environment (getenv).
std::string tls_verify_from_process_env(TlsVerify* out);

// A certificate's SHA-256 fingerprint as 64 lowercase hex digits, the form
// pinned in MUSTER_TLS_FINGERPRINT and written to musterd.json; "" for none.
std::string certificate_fingerprint(x509_st* cert);

// Splits "http://host:port/..." or "https://host:port/...": tls says which.
struct UrlParts {
  bool tls = false;
  std::string host;
  int port = 80;
  std::string path;  // "" or "/..." (the rest of the URL)
};
std::optional<UrlParts> parse_url(const std::string& url);

class ClientSocket {
 public:
  using Deadline = std::chrono::steady_clock::time_point;
  enum class Io {
    kOk,
    kClosed,   // the peer ended the connection (EOF, reset, broken pipe)
    kTimeout,  // the deadline passed
    kError,    // anything else (error() says what)
  };

  ClientSocket();
  ~ClientSocket();
  ClientSocket(ClientSocket&&) noexcept;
  ClientSocket& operator=(ClientSocket&&) noexcept;

  // TCP to host:port, then the TLS handshake and verification when `tls` is
  // set, within `deadline`. Not open on failure, with error() saying why
  // ("TLS: the certificate of 10.0.0.1:7878 has SHA-256 ab..., not the
  // pinned cd... (MUSTER_TLS_FINGERPRINT)").
  static ClientSocket connect(const std::string& host, int port, const TlsVerify* tls, Deadline deadline);

  bool is_open() const;
  const std::string& error() const { return error_; }
  // True when the connection failed because the certificate did not verify
  // (a retry will not help).
  bool certificate_refused() const { return certificate_refused_; }

  // All of `data`, or why not.
  Io send_all(const char* data, size_t size, Deadline deadline);
  // Up to `size` bytes into `buf` (*got set), once at least one is there.
  Io recv_some(char* buf, size_t size, size_t* got, Deadline deadline);
  void close();

 private:
  struct Tls;
  int fd_ = -1;
  std::unique_ptr<Tls> tls_;
  std::string error_;
  bool certificate_refused_ = false;
};

}  // namespace muster::base
