#include "service/http/server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <string_view>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/strand.hpp>
#include <openssl/ssl.h>
#include <spdlog/spdlog.h>

#include "service/http/connection.h"
#include "service/http/context.h"

namespace muster::service {

namespace net = boost::asio;
using net::ip::tcp;

namespace {

// The reply to a connection over the limit: written without waiting (the
// socket buffer is empty) and the socket closed.
constexpr std::string_view kBusyBody =
    "{\"error\":{\"code\":\"unavailable\",\"message\":\"musterd has too many open connections; retry later\"}}\n";
const std::string kBusy =
    "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nConnection: close\r\nContent-Length: " +
    std::to_string(kBusyBody.size()) + "\r\n\r\n" + std::string(kBusyBody);

api::Result<sockaddr_in> ipv4(const std::string& host, int port) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  if (::inet_pton(AF_INET, host.c_str(), &addr.sin_addr) != 1) {
    return api::invalid_argument("--listen host must be an IPv4 address, not '" + host + "'", "listen");
  }
  return addr;
}

// TLS 1.2 or later, with the certificate chain and key of `files`.
api::Result<std::unique_ptr<net::ssl::context>> tls_context(const TlsServerFiles& files) {
  auto tls = std::make_unique<net::ssl::context>(net::ssl::context::tls_server);
  boost::system::error_code ec;
  tls->set_options(net::ssl::context::default_workarounds | net::ssl::context::no_sslv2 |
                       net::ssl::context::no_sslv3 | net::ssl::context::no_tlsv1 | net::ssl::context::no_tlsv1_1 |
                       net::ssl::context::single_dh_use,
                   ec);
  tls->use_certificate_chain_file(files.cert_file, ec);
  if (ec) {
    return api::invalid_argument("cannot use the TLS certificate " + files.cert_file + ": " + ec.message(),
                                 "tls-cert");
  }
  tls->use_private_key_file(files.key_file, net::ssl::context::pem, ec);
  if (ec || ::SSL_CTX_check_private_key(tls->native_handle()) != 1) {
    if (ec && ec.message().find("mismatch") == std::string::npos) {
      return api::invalid_argument("cannot use the TLS key " + files.key_file + ": " + ec.message(), "tls-key");
    }
    return api::invalid_argument("the TLS key " + files.key_file + " does not match the certificate " +
                                     files.cert_file,
                                 "tls-key");
  }
  return tls;
}

}  // namespace

base::TaskQueueOptions http::ServerContext::lane_options(int threads, size_t max_queued, const char* name) {
  base::TaskQueueOptions o;
  o.threads = static_cast<size_t>(std::max(threads, 1));
  o.max_queued = max_queued;
  o.name = name;
  o.on_error = [](const std::string& what) { spdlog::error("{}", what); };
  return o;
}

api::Result<int> pick_free_port(const std::string& host) {
  auto addr = ipv4(host, 0);
  if (!addr) return addr.status();
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return api::internal_error("socket: " + std::string(std::strerror(errno)));
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr.value()), sizeof(sockaddr_in)) != 0) {
    ::close(fd);
    return api::unavailable("cannot bind " + host + ": " + std::strerror(errno));
  }
  socklen_t len = sizeof(sockaddr_in);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr.value()), &len);
  ::close(fd);
  return static_cast<int>(ntohs(addr.value().sin_port));
}

HttpServer::HttpServer(HttpServerOptions options, const Router& router, const Authenticator& auth)
    : ctx_(std::make_shared<http::ServerContext>(std::move(options), router, auth)), port_(ctx_->options.port) {}

HttpServer::~HttpServer() { stop(); }

std::string HttpServer::url() const { return std::string(ctx_->options.tls ? "https://" : "http://") + ctx_->options.host + ":" + std::to_string(port_); }

size_t HttpServer::connection_count() const { return ctx_->connection_count(); }

api::Status HttpServer::listen() {
  if (listen_fd_ >= 0 || started_) return api::Status::ok();
  const auto& o = ctx_->options;
  if (o.tls && !ctx_->tls) {
    auto tls = tls_context(*o.tls);
    if (!tls) return tls.status();
    ctx_->tls = std::move(tls).value();
  }
  auto addr = ipv4(o.host, o.port);
  if (!addr) return addr.status();
  // Our own socket, so that it is CLOEXEC from its first instant.
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return api::internal_error("socket: " + std::string(std::strerror(errno)));
  const int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr.value()), sizeof(sockaddr_in)) != 0 || ::listen(fd, 1024) != 0) {
    const std::string err = std::strerror(errno);
    ::close(fd);
    return api::unavailable("cannot listen on " + url() + ": " + err);
  }
  socklen_t len = sizeof(sockaddr_in);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr.value()), &len);
  port_ = ntohs(addr.value().sin_port);
  listen_fd_ = fd;
  return api::Status::ok();
}

api::Status HttpServer::start() {
  if (started_) return api::Status::ok();
  if (auto s = listen(); !s) return s;
  const int fd = listen_fd_;
  listen_fd_ = -1;
  acceptor_ = std::make_unique<tcp::acceptor>(net::make_strand(*ctx_->ios.front()));
  boost::system::error_code ec;
  acceptor_->assign(tcp::v4(), fd, ec);
  if (ec) {
    ::close(fd);
    return api::internal_error("cannot serve on " + url() + ": " + ec.message());
  }
  retry_timer_ = std::make_unique<net::steady_timer>(acceptor_->get_executor());
  accept();
  for (auto& io : ctx_->ios) {
    io_work_.push_back(net::make_work_guard(*io));
    io_threads_.emplace_back([&io = *io] { io.run(); });
  }
  started_ = true;
  return api::Status::ok();
}

void HttpServer::accept() {
  acceptor_->async_wait(tcp::acceptor::wait_read, [this](const boost::system::error_code& ec) { on_readable(ec); });
}

// Accepts every pending connection with accept4 (CLOEXEC, non-blocking);
// one over max_connections gets kBusy and is closed.
void HttpServer::on_readable(const boost::system::error_code& ec) {
  if (ec == net::error::operation_aborted || !acceptor_->is_open()) return;
  for (;;) {
    const int fd = ::accept4(acceptor_->native_handle(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) break;
      // EMFILE, ENFILE, ENOBUFS: out of descriptors or memory. Retry
      // shortly instead of spinning on a readable listener.
      spdlog::warn("accept on {}: {}", url(), std::strerror(errno));
      retry_timer_->expires_after(std::chrono::milliseconds(100));
      retry_timer_->async_wait([this](const boost::system::error_code& e) {
        if (!e) accept();
      });
      return;
    }
    if (ctx_->connection_count() >= ctx_->options.max_connections) {
      // Over TLS the plain answer would be noise before a handshake: close only.
      if (!ctx_->tls) (void)!::send(fd, kBusy.data(), kBusy.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
      ::close(fd);
      continue;
    }
    const int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    // No strand: each io_context is run by one thread, which serialises
    // the connection's handlers and what other threads post to it.
    tcp::socket socket(ctx_->io_for_next_connection());
    boost::system::error_code aec;
    socket.assign(tcp::v4(), fd, aec);
    if (aec) {
      ::close(fd);
      continue;
    }
    auto connection = http::make_connection(std::move(socket), ctx_);
    ctx_->add_connection(connection);
    connection->start();
  }
  accept();
}

void HttpServer::stop() {
  if (listen_fd_ >= 0) {  // listening, never served
    ::close(listen_fd_);
    listen_fd_ = -1;
  }
  if (!started_) return;
  started_ = false;
  // 1. No more posts from other threads; 2. close the listener and every
  // connection (each on its strand); 3. let the I/O threads finish what
  // the closes complete, then stop them; 4. the handlers.
  ctx_->gate.close();
  net::post(acceptor_->get_executor(), [this] {
    boost::system::error_code ec;
    retry_timer_->cancel();
    acceptor_->close(ec);
  });
  std::vector<std::shared_ptr<http::Connection>> open;
  {
    std::lock_guard<std::mutex> lock(ctx_->connections_mu);
    for (auto& [_, c] : ctx_->connections) open.push_back(c);
  }
  for (auto& c : open) c->close();
  open.clear();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  while (ctx_->connection_count() > 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  io_work_.clear();
  for (auto& io : ctx_->ios) io->stop();
  for (auto& t : io_threads_) t.join();
  io_threads_.clear();
  // Run what the stop left queued (completions of the closes), so that no
  // handler stays behind holding a connection.
  for (auto& io : ctx_->ios) {
    io->restart();
    for (int i = 0; i < 100 && io->poll() > 0; ++i) {
    }
  }
  ctx_->user_lane.close();
  ctx_->agent_lane.close();
  {
    std::lock_guard<std::mutex> lock(ctx_->connections_mu);
    ctx_->connections.clear();
    ctx_->open_connections = 0;
  }
  acceptor_.reset();
  retry_timer_.reset();
}

}  // namespace muster::service
