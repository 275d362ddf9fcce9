// The libssh2 implementation of the remote seam: RAII owners for the socket,
// the session and each channel; host keys checked against known_hosts; keys
// only. A started process switches its session to non-blocking mode and is
// read with poll(2) on the socket, sending keepalives so that a dead peer
// (cut link) surfaces as a socket error within ConnectOptions::dead_after.
#include <fcntl.h>
#include <libssh2.h>
#include <libssh2_sftp.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <mutex>

#include "workers/remote/remote.h"

namespace muster::workers::remote {
namespace {

std::once_flag g_init;
std::mutex g_known_hosts_mu;

int signal_number(const std::string& name) {
  static const std::pair<const char*, int> kSignals[] = {{"HUP", 1}, {"INT", 2}, {"QUIT", 3}, {"ABRT", 6},
                                                         {"KILL", 9}, {"SEGV", 11}, {"PIPE", 13}, {"TERM", 15}};
  for (const auto& [n, v] : kSignals)
    if (name == n) return v;
  return 0;
}

class Socket {
 public:
  Socket() = default;
  explicit Socket(int fd) : fd_(fd) {}
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;
  Socket(Socket&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  ~Socket() {
    if (fd_ >= 0) ::close(fd_);
  }
  int fd() const { return fd_; }

 private:
  int fd_ = -1;
};

std::string last_error(LIBSSH2_SESSION* s) {
  char* msg = nullptr;
  int len = 0;
  libssh2_session_last_error(s, &msg, &len, 0);
  return msg ? std::string(msg, static_cast<size_t>(len)) : std::string("unknown libssh2 error");
}

api::Result<Socket> tcp_connect(const Host& host, std::chrono::milliseconds timeout, std::chrono::milliseconds dead) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  std::string port = std::to_string(host.port);
  if (int rc = getaddrinfo(host.address.c_str(), port.c_str(), &hints, &res); rc != 0)
    return api::unavailable("host " + host.label() + ": cannot resolve: " + gai_strerror(rc));
  std::string why = "no address";
  for (addrinfo* a = res; a != nullptr; a = a->ai_next) {
    Socket sock(::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol));
    if (sock.fd() < 0) continue;
    int flags = fcntl(sock.fd(), F_GETFL);
    fcntl(sock.fd(), F_SETFL, flags | O_NONBLOCK);
    int rc = ::connect(sock.fd(), a->ai_addr, a->ai_addrlen);
    if (rc != 0 && errno == EINPROGRESS) {
      pollfd p{sock.fd(), POLLOUT, 0};
      rc = ::poll(&p, 1, static_cast<int>(timeout.count()));
      if (rc == 0) {
        why = "connect timed out after " + std::to_string(timeout.count()) + " ms";
        continue;
      }
      int err = 0;
      socklen_t len = sizeof err;
      getsockopt(sock.fd(), SOL_SOCKET, SO_ERROR, &err, &len);
      if (err != 0) {
        why = std::strerror(err);
        continue;
      }
      rc = 0;
    } else if (rc != 0) {
      why = std::strerror(errno);
      continue;
    }
    fcntl(sock.fd(), F_SETFL, flags);
    int one = 1;
    setsockopt(sock.fd(), SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
    setsockopt(sock.fd(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    unsigned int user_timeout = static_cast<unsigned int>(dead.count());
    setsockopt(sock.fd(), IPPROTO_TCP, TCP_USER_TIMEOUT, &user_timeout, sizeof user_timeout);
    freeaddrinfo(res);
    return sock;
  }
  freeaddrinfo(res);
  return api::unavailable("host " + host.label() + ": cannot connect: " + why);
}

int knownhost_key_type(int hostkey_type) {
  switch (hostkey_type) {
    case LIBSSH2_HOSTKEY_TYPE_RSA: return LIBSSH2_KNOWNHOST_KEY_SSHRSA;
    case LIBSSH2_HOSTKEY_TYPE_DSS: return LIBSSH2_KNOWNHOST_KEY_SSHDSS;
    case LIBSSH2_HOSTKEY_TYPE_ECDSA_256: return LIBSSH2_KNOWNHOST_KEY_ECDSA_256;
    case LIBSSH2_HOSTKEY_TYPE_ECDSA_384: return LIBSSH2_KNOWNHOST_KEY_ECDSA_384;
    case LIBSSH2_HOSTKEY_TYPE_ECDSA_521: return LIBSSH2_KNOWNHOST_KEY_ECDSA_521;
    case LIBSSH2_HOSTKEY_TYPE_ED25519: return LIBSSH2_KNOWNHOST_KEY_ED25519;
    default: return LIBSSH2_KNOWNHOST_KEY_UNKNOWN;
  }
}

// Owns the channel; closes and frees it (in blocking mode) when destroyed.
class Channel {
 public:
  Channel(LIBSSH2_SESSION* s, LIBSSH2_CHANNEL* c) : s_(s), c_(c) {}
  Channel(const Channel&) = delete;
  Channel& operator=(const Channel&) = delete;
  ~Channel() {
    if (c_ == nullptr) return;
    libssh2_session_set_blocking(s_, 1);
    libssh2_session_set_timeout(s_, 2000);
    libssh2_channel_close(c_);
    libssh2_channel_free(c_);
  }
  LIBSSH2_CHANNEL* get() const { return c_; }

  int exit_code() {
    char* signame = nullptr;
    size_t len = 0;
    libssh2_channel_get_exit_signal(c_, &signame, &len, nullptr, nullptr, nullptr, nullptr);
    if (signame != nullptr) {
      std::string name(signame, len);
      libssh2_free(s_, signame);
      return 128 + signal_number(name);
    }
    return libssh2_channel_get_exit_status(c_);
  }

 private:
  LIBSSH2_SESSION* s_;
  LIBSSH2_CHANNEL* c_;
};

class Libssh2Process final : public RemoteProcess {
 public:
  Libssh2Process(LIBSSH2_SESSION* s, int fd, std::unique_ptr<Channel> ch) : s_(s), fd_(fd), ch_(std::move(ch)) {}

  ReadEvent read(std::string& out, std::chrono::milliseconds wait) override {
    if (ended_) return {ReadState::kEnded, exit_code_, {}};
    char buf[16384];
    bool got = false;
    for (int stream : {0, SSH_EXTENDED_DATA_STDERR}) {
      for (;;) {
        ssize_t n = libssh2_channel_read_ex(ch_->get(), stream, buf, sizeof buf);
        if (n > 0) {
          out.append(buf, static_cast<size_t>(n));
          got = true;
          continue;
        }
        if (n == 0 || n == LIBSSH2_ERROR_EAGAIN) break;
        return {ReadState::kLost, -1, "connection lost: " + last_error(s_)};
      }
    }
    if (libssh2_channel_eof(ch_->get())) {
      // Remote EOF: close our side and wait (briefly) for the exit status.
      bool closed = false;
      for (int i = 0; i < 200; ++i) {
        int rc = closed ? libssh2_channel_wait_closed(ch_->get()) : libssh2_channel_close(ch_->get());
        if (rc == LIBSSH2_ERROR_EAGAIN) {
          wait_socket(10);
          continue;
        }
        if (closed || rc != 0) break;
        closed = true;
      }
      ended_ = true;
      exit_code_ = ch_->exit_code();
      return {ReadState::kEnded, exit_code_, {}};
    }
    if (got) return {ReadState::kData, -1, {}};
    int next = 0;
    int rc = libssh2_keepalive_send(s_, &next);
    if (rc != 0 && rc != LIBSSH2_ERROR_EAGAIN) return {ReadState::kLost, -1, "connection lost: " + last_error(s_)};
    pollfd p{fd_, POLLIN, 0};
    int dirs = libssh2_session_block_directions(s_);
    if (dirs & LIBSSH2_SESSION_BLOCK_OUTBOUND) p.events |= POLLOUT;
    int pr = ::poll(&p, 1, static_cast<int>(wait.count()));
    if (pr > 0 && (p.revents & (POLLERR | POLLHUP)) && !(p.revents & POLLIN)) {
      int err = 0;
      socklen_t len = sizeof err;
      getsockopt(fd_, SOL_SOCKET, SO_ERROR, &err, &len);
      return {ReadState::kLost, -1, std::string("connection lost: ") + (err ? std::strerror(err) : "hang-up")};
    }
    return {ReadState::kIdle, -1, {}};
  }

 private:
  void wait_socket(int ms) {
    pollfd p{fd_, POLLIN, 0};
    ::poll(&p, 1, ms);
  }

  LIBSSH2_SESSION* s_;
  int fd_;
  std::unique_ptr<Channel> ch_;
  bool ended_ = false;
  int exit_code_ = -1;
};

class Libssh2Session final : public RemoteSession {
 public:
  Libssh2Session(Host host, Socket sock, LIBSSH2_SESSION* s, std::chrono::milliseconds timeout)
      : host_(std::move(host)), sock_(std::move(sock)), s_(s), timeout_(timeout) {}
  ~Libssh2Session() override {
    libssh2_session_set_blocking(s_, 1);
    libssh2_session_set_timeout(s_, 2000);
    libssh2_session_disconnect(s_, "muster: bye");
    libssh2_session_free(s_);
  }

  api::Result<RemoteResult> run(const std::string& command) override {
    libssh2_session_set_blocking(s_, 1);
    libssh2_session_set_timeout(s_, static_cast<long>(timeout_.count()));
    auto ch = open(command);
    if (!ch) return ch.status();
    RemoteResult r;
    char buf[16384];
    for (int stream : {0, SSH_EXTENDED_DATA_STDERR}) {
      for (;;) {
        ssize_t n = libssh2_channel_read_ex(ch.value()->get(), stream, buf, sizeof buf);
        if (n > 0) {
          (stream == 0 ? r.out : r.err).append(buf, static_cast<size_t>(n));
          continue;
        }
        if (n == 0) break;
        return api::unavailable("host " + host_.label() + ": reading the output of `" + command +
                                "` failed: " + last_error(s_));
      }
    }
    libssh2_channel_close(ch.value()->get());
    libssh2_channel_wait_closed(ch.value()->get());
    r.exit_code = ch.value()->exit_code();
    return r;
  }

  api::Result<std::unique_ptr<RemoteProcess>> start(const std::string& command) override {
    libssh2_session_set_blocking(s_, 1);
    libssh2_session_set_timeout(s_, static_cast<long>(timeout_.count()));
    auto ch = open(command);
    if (!ch) return ch.status();
    libssh2_session_set_blocking(s_, 0);
    libssh2_keepalive_config(s_, 1, 2);
    return std::unique_ptr<RemoteProcess>(
        std::make_unique<Libssh2Process>(s_, sock_.fd(), std::move(ch.value())));
  }

  api::Status upload(const std::filesystem::path& local, const std::string& remote_path, int mode) override {
    libssh2_session_set_blocking(s_, 1);
    libssh2_session_set_timeout(s_, static_cast<long>(timeout_.count()));
    std::ifstream in(local, std::ios::binary);
    if (!in) return api::internal_error("cannot read " + local.string() + " to copy it to " + host_.label());
    LIBSSH2_SFTP* sftp = libssh2_sftp_init(s_);
    if (sftp == nullptr) return api::unavailable("host " + host_.label() + ": SFTP failed: " + last_error(s_));
    std::string tmp = remote_path + ".muster-upload";
    LIBSSH2_SFTP_HANDLE* h = libssh2_sftp_open(sftp, tmp.c_str(),
                                               LIBSSH2_FXF_WRITE | LIBSSH2_FXF_CREAT | LIBSSH2_FXF_TRUNC, mode);
    api::Status status;
    if (h == nullptr) {
      status = api::unavailable("host " + host_.label() + ": cannot create " + tmp + ": " + last_error(s_));
    } else {
      char buf[32768];
      while (status.is_ok() && in) {
        in.read(buf, sizeof buf);
        std::streamsize got = in.gcount();
        const char* p = buf;
        while (got > 0) {
          ssize_t n = libssh2_sftp_write(h, p, static_cast<size_t>(got));
          if (n < 0) {
            status = api::unavailable("host " + host_.label() + ": writing " + tmp + " failed: " + last_error(s_));
            break;
          }
          p += n;
          got -= n;
        }
      }
      libssh2_sftp_close(h);
      if (status.is_ok()) {
        libssh2_sftp_unlink(sftp, remote_path.c_str());
        if (libssh2_sftp_rename(sftp, tmp.c_str(), remote_path.c_str()) != 0)
          status = api::unavailable("host " + host_.label() + ": cannot move " + tmp + " to " + remote_path + ": " +
                                    last_error(s_));
      }
    }
    libssh2_sftp_shutdown(sftp);
    return status;
  }

 private:
  api::Result<std::unique_ptr<Channel>> open(const std::string& command) {
    LIBSSH2_CHANNEL* c = libssh2_channel_open_session(s_);
    if (c == nullptr) return api::unavailable("host " + host_.label() + ": cannot open a channel: " + last_error(s_));
    auto ch = std::make_unique<Channel>(s_, c);
    if (libssh2_channel_exec(c, command.c_str()) != 0)
      return api::unavailable("host " + host_.label() + ": cannot run `" + command + "`: " + last_error(s_));
    return ch;
  }

  Host host_;
  Socket sock_;
  LIBSSH2_SESSION* s_;
  std::chrono::milliseconds timeout_;
};

class Libssh2Connector final : public Connector {
 public:
  explicit Libssh2Connector(ConnectOptions options) : options_(std::move(options)) {
    std::call_once(g_init, [] { libssh2_init(0); });
  }

  api::Result<std::unique_ptr<RemoteSession>> connect(const Host& host) override {
    auto sock = tcp_connect(host, options_.timeout, options_.dead_after);
    if (!sock) return sock.status();
    LIBSSH2_SESSION* s = libssh2_session_init();
    if (s == nullptr) return api::internal_error("libssh2_session_init failed");
    int fd = sock.value().fd();
    // From here the session object owns the socket and the libssh2 session.
    auto session = std::make_unique<Libssh2Session>(host, std::move(sock.value()), s, options_.timeout);
    libssh2_session_set_blocking(s, 1);
    libssh2_session_set_timeout(s, static_cast<long>(options_.timeout.count()));
    if (libssh2_session_handshake(s, fd) != 0)
      return api::unavailable("host " + host.label() + ": SSH handshake failed: " + last_error(s));
    if (auto st = check_host_key(s, host); !st) return st;
    std::string key = host.identity_file.string();
    if (libssh2_userauth_publickey_fromfile(s, host.user.c_str(), nullptr, key.c_str(), "") != 0)
      return api::unavailable("host " + host.label() + ": public key " + key + " was not accepted for user " +
                              host.user + " (" + last_error(s) +
                              "); put its .pub in the host's authorized_keys — muster uses keys only");
    return std::unique_ptr<RemoteSession>(std::move(session));
  }

 private:
  api::Status check_host_key(LIBSSH2_SESSION* s, const Host& host) {
    size_t len = 0;
    int type = 0;
    const char* key = libssh2_session_hostkey(s, &len, &type);
    if (key == nullptr) return api::unavailable("host " + host.label() + ": no host key offered");
    std::lock_guard<std::mutex> lock(g_known_hosts_mu);
    LIBSSH2_KNOWNHOSTS* kh = libssh2_knownhost_init(s);
    if (kh == nullptr) return api::internal_error("libssh2_knownhost_init failed");
    std::string file = options_.known_hosts.string();
    if (!file.empty()) libssh2_knownhost_readfile(kh, file.c_str(), LIBSSH2_KNOWNHOST_FILE_OPENSSH);
    int mask = LIBSSH2_KNOWNHOST_TYPE_PLAIN | LIBSSH2_KNOWNHOST_KEYENC_RAW | knownhost_key_type(type);
    libssh2_knownhost* found = nullptr;
    int rc = libssh2_knownhost_checkp(kh, host.address.c_str(), host.port, key, len, mask, &found);
    api::Status status;
    if (rc == LIBSSH2_KNOWNHOST_CHECK_MISMATCH) {
      status = api::unavailable("host " + host.label() + ": HOST KEY MISMATCH against " + file +
                                "; the host was reinstalled or someone is in the middle. Remove its line from " +
                                file + " only if you know why it changed");
    } else if (rc != LIBSSH2_KNOWNHOST_CHECK_MATCH) {
      if (options_.accept_new && !file.empty()) {
        std::string name = host.port == 22 ? host.address : "[" + host.address + "]:" + std::to_string(host.port);
        libssh2_knownhost_addc(kh, name.c_str(), nullptr, key, len, nullptr, 0, mask, nullptr);
        if (libssh2_knownhost_writefile(kh, file.c_str(), LIBSSH2_KNOWNHOST_FILE_OPENSSH) != 0)
          status = api::internal_error("cannot write " + file + ": " + last_error(s));
      } else {
        status = api::unavailable("host " + host.label() + ": its host key is not in known_hosts " +
                                  (file.empty() ? std::string("(none configured)") : file) +
                                  "; add it (ssh-keyscan -p " + std::to_string(host.port) + " " + host.address +
                                  " >> FILE) or set --backend-opt accept_new=true");
      }
    }
    libssh2_knownhost_free(kh);
    return status;
  }

  ConnectOptions options_;
};

}  // namespace

std::unique_ptr<Connector> make_libssh2_connector(const ConnectOptions& options) {
  return std::make_unique<Libssh2Connector>(options);
}

}  // namespace muster::workers::remote
