#include "api/base/client_socket.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

namespace muster::base {

namespace {

bool wait_fd(int fd, short events, ClientSocket::Deadline deadline) {
  for (;;) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()).count();
    if (left <= 0) return false;
    pollfd p{fd, events, 0};
    const int r = ::poll(&p, 1, static_cast<int>(left));
    if (r > 0) return true;
    if (r == 0 || errno != EINTR) return false;
  }
}

std::string openssl_error() {
  const unsigned long e = ERR_get_error();
  ERR_clear_error();
  if (e == 0) return std::strerror(errno);
  char buf[256];
  ERR_error_string_n(e, buf, sizeof buf);
  return buf;
}


bool is_ipv4(const std::string& s) {
  in_addr a{};
  return ::inet_pton(AF_INET, s.c_str(), &a) == 1;
}

}  // namespace

std::string tls_verify_from_env(const std::map<std::string, std::string>& env, TlsVerify* out) {
  *out = TlsVerify{};
  if (auto it = env.find(kEnvTlsFingerprint); it != env.end() && !it->second.empty()) {
    auto fp = parse_fingerprint(it->second);
    if (!fp) {
      return std::string(kEnvTlsFingerprint) + " must be the SHA-256 fingerprint of musterd's certificate (64 hex " +
             "digits, colons allowed), not '" + it->second + "'";
    }
    out->fingerprint = *fp;
  }
  if (auto it = env.find(kEnvCaFile); it != env.end()) out->ca_file = it->second;
  return "";
}

std::string tls_verify_from_process_env(TlsVerify* out) {
  std::map<std::string, std::string> env;
  for (const char* name : {kEnvTlsFingerprint, kEnvCaFile}) {
    if (const char* v = std::getenv(name)) env[name] = v;
  }
  return tls_verify_from_env(env, out);
}

std::optional<UrlParts> parse_url(const std::string& url) {
  UrlParts u;
  std::string rest;
  if (url.compare(0, 7, "http://") == 0) {
    rest = url.substr(7);
  } else if (url.compare(0, 8, "https://") == 0) {
    u.tls = true;
    u.port = 443;
    rest = url.substr(8);
  } else {
    return std::nullopt;
  }
  const size_t slash = rest.find('/');
  if (slash != std::string::npos) {
    u.path = rest.substr(slash);
    rest = rest.substr(0, slash);
  }
  const size_t colon = rest.rfind(':');
  if (colon != std::string::npos) {
    const std::string port = rest.substr(colon + 1);
    if (port.empty() || port.size() > 5 || port.find_first_not_of("0123456789") != std::string::npos) {
      return std::nullopt;
    }
    u.port = std::atoi(port.c_str());
    if (u.port < 1 || u.port > 65535) return std::nullopt;
    rest = rest.substr(0, colon);
  }
  if (rest.empty()) return std::nullopt;
  u.host = rest;
  return u;
}

struct ClientSocket::Tls {
  SSL_CTX* ctx = nullptr;
  SSL* ssl = nullptr;
  ~Tls() {
    if (ssl) SSL_free(ssl);
    if (ctx) SSL_CTX_free(ctx);
  }
};

ClientSocket::ClientSocket() = default;
ClientSocket::~ClientSocket() { close(); }
ClientSocket::ClientSocket(ClientSocket&& o) noexcept
    : fd_(o.fd_), tls_(std::move(o.tls_)), error_(std::move(o.error_)), certificate_refused_(o.certificate_refused_) {
  o.fd_ = -1;
}
ClientSocket& ClientSocket::operator=(ClientSocket&& o) noexcept {
  if (this != &o) {
    close();
    fd_ = o.fd_;
    o.fd_ = -1;
    tls_ = std::move(o.tls_);
    error_ = std::move(o.error_);
    certificate_refused_ = o.certificate_refused_;
  }
  return *this;
}

bool ClientSocket::is_open() const { return fd_ >= 0; }

void ClientSocket::close() {
  tls_.reset();  // no close_notify: the server reads every request by its length
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

ClientSocket ClientSocket::connect(const std::string& host, int port, const TlsVerify* tls, Deadline deadline) {
  ClientSocket s;
  const std::string where = host + ":" + std::to_string(port);
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res) != 0 || !res) {
    s.error_ = "cannot resolve " + host;
    return s;
  }
  s.fd_ = ::socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  int rc = s.fd_ < 0 ? -1 : ::connect(s.fd_, res->ai_addr, res->ai_addrlen);
  const int connect_errno = errno;  // before freeaddrinfo, which may change errno
  ::freeaddrinfo(res);
  if (s.fd_ < 0 || (rc != 0 && connect_errno != EINPROGRESS)) {
    s.error_ = "connect to " + where + ": " + std::strerror(connect_errno);
    s.close();
    return s;
  }
  if (rc != 0) {
    int err = 0;
    socklen_t len = sizeof err;
    if (!wait_fd(s.fd_, POLLOUT, deadline)) {
      err = ETIMEDOUT;
    } else if (::getsockopt(s.fd_, SOL_SOCKET, SO_ERROR, &err, &len) != 0) {
      err = errno;
    }
    if (err != 0) {
      s.error_ = "connect to " + where + ": " + std::strerror(err);
      s.close();
      return s;
    }
  }
  if (!tls) return s;

  // The handshake. The certificate: against the CA file (or the system's
  // CAs when nothing is pinned) with the host checked, and its SHA-256
  // against the pin.
  auto t = std::make_unique<Tls>();
  t->ctx = SSL_CTX_new(TLS_client_method());
  if (!t->ctx) {
    s.error_ = "TLS: " + openssl_error();
    s.close();
    return s;
  }
  SSL_CTX_set_min_proto_version(t->ctx, TLS1_2_VERSION);
  SSL_CTX_set_options(t->ctx, SSL_OP_IGNORE_UNEXPECTED_EOF);
  const bool check_chain = !tls->ca_file.empty() || tls->fingerprint.empty();
  if (!tls->ca_file.empty()) {
    if (SSL_CTX_load_verify_locations(t->ctx, tls->ca_file.c_str(), nullptr) != 1) {
      s.error_ = "TLS: cannot read the CA file " + tls->ca_file + " (" + kEnvCaFile + "): " + openssl_error();
      s.certificate_refused_ = true;
      s.close();
      return s;
    }
  } else if (check_chain) {
    SSL_CTX_set_default_verify_paths(t->ctx);
  }
  SSL_CTX_set_verify(t->ctx, check_chain ? SSL_VERIFY_PEER : SSL_VERIFY_NONE, nullptr);
  t->ssl = SSL_new(t->ctx);
  SSL_set_fd(t->ssl, s.fd_);
  if (!is_ipv4(host)) SSL_set_tlsext_host_name(t->ssl, host.c_str());
  if (check_chain) {
    X509_VERIFY_PARAM* param = SSL_get0_param(t->ssl);
    if (is_ipv4(host)) {
      X509_VERIFY_PARAM_set1_ip_asc(param, host.c_str());
    } else {
      X509_VERIFY_PARAM_set1_host(param, host.c_str(), 0);
    }
  }
  for (;;) {
    const int r = SSL_connect(t->ssl);
    if (r == 1) break;
    const int e = SSL_get_error(t->ssl, r);
    if ((e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) &&
        wait_fd(s.fd_, e == SSL_ERROR_WANT_READ ? POLLIN : POLLOUT, deadline)) {
      continue;
    }
    const long verified = SSL_get_verify_result(t->ssl);
    if (check_chain && verified != X509_V_OK) {
      s.error_ = "TLS: the certificate of " + where + " is not trusted: " + X509_verify_cert_error_string(verified) +
                 (tls->ca_file.empty() ? std::string(" (no CA file given: set ") + kEnvCaFile + " or " +
                                             kEnvTlsFingerprint + ")"
                                       : " (CA file " + tls->ca_file + ")");
      s.certificate_refused_ = true;
    } else if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) {
      s.error_ = "TLS handshake with " + where + " timed out";
    } else {
      s.error_ = "TLS handshake with " + where + " failed (is it musterd over https?): " + openssl_error();
    }
    s.close();
    return s;
  }
  if (!tls->fingerprint.empty()) {
    X509* peer = SSL_get1_peer_certificate(t->ssl);
    std::string got = certificate_fingerprint(peer);
    if (peer) X509_free(peer);
    if (got.empty()) got = "(none)";
    if (got != tls->fingerprint) {
      s.error_ = "TLS: the certificate of " + where + " has SHA-256 fingerprint " + got + ", not the pinned " +
                 tls->fingerprint + " (" + kEnvTlsFingerprint + "): not musterd, or a musterd with another " +
                 "certificate; refusing to send the token";
      s.certificate_refused_ = true;
      s.close();
      return s;
    }
  }
  s.tls_ = std::move(t);
  return s;
}

ClientSocket::Io ClientSocket::send_all(const char* data, size_t size, Deadline deadline) {
  size_t sent = 0;
  while (sent < size) {
    if (tls_) {
      const int n = SSL_write(tls_->ssl, data + sent, static_cast<int>(size - sent));
      if (n > 0) {
        sent += static_cast<size_t>(n);
        continue;
      }
      const int e = SSL_get_error(tls_->ssl, n);
      if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) {
        if (!wait_fd(fd_, e == SSL_ERROR_WANT_READ ? POLLIN : POLLOUT, deadline)) return Io::kTimeout;
        continue;
      }
      if (e == SSL_ERROR_ZERO_RETURN || (e == SSL_ERROR_SYSCALL && (errno == EPIPE || errno == ECONNRESET))) {
        ERR_clear_error();
        return Io::kClosed;
      }
      error_ = "TLS send: " + openssl_error();
      return Io::kError;
    }
    const ssize_t n = ::send(fd_, data + sent, size - sent, MSG_NOSIGNAL);
    if (n > 0) {
      sent += static_cast<size_t>(n);
    } else if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
      if (!wait_fd(fd_, POLLOUT, deadline)) return Io::kTimeout;
    } else if (n < 0 && (errno == EPIPE || errno == ECONNRESET)) {
      return Io::kClosed;
    } else {
      error_ = std::string("send: ") + std::strerror(errno);
      return Io::kError;
    }
  }
  return Io::kOk;
}

ClientSocket::Io ClientSocket::recv_some(char* buf, size_t size, size_t* got, Deadline deadline) {
  *got = 0;
  for (;;) {
    if (tls_) {
      // Read first: decrypted bytes may wait inside OpenSSL with nothing on the socket.
      const int n = SSL_read(tls_->ssl, buf, static_cast<int>(size));
      if (n > 0) {
        *got = static_cast<size_t>(n);
        return Io::kOk;
      }
      const int e = SSL_get_error(tls_->ssl, n);
      if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) {
        if (!wait_fd(fd_, e == SSL_ERROR_WANT_READ ? POLLIN : POLLOUT, deadline)) return Io::kTimeout;
        continue;
      }
      if (e == SSL_ERROR_ZERO_RETURN || e == SSL_ERROR_SYSCALL) {
        ERR_clear_error();
        return Io::kClosed;
      }
      error_ = "TLS receive: " + openssl_error();
      return Io::kError;
    }
    const ssize_t n = ::recv(fd_, buf, size, 0);
    if (n > 0) {
      *got = static_cast<size_t>(n);
      return Io::kOk;
    }
    if (n == 0) return Io::kClosed;
    if (errno == EAGAIN || errno == EINTR) {
      if (!wait_fd(fd_, POLLIN, deadline)) return Io::kTimeout;
      continue;
    }
    if (errno == ECONNRESET) return Io::kClosed;
    error_ = std::string("recv: ") + std::strerror(errno);
    return Io::kError;
  }
}

std::string certificate_fingerprint(x509_st* cert) {
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

}  // namespace muster::base
