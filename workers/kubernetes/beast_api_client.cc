// The real ApiClient: HTTPS to the API server with Boost.Beast over Asio's
// OpenSSL stream (api_client.h). Each connection has its own io_context and
// is driven by the calling thread (async operations run to completion with
// run_one/run_for), so a deadline or a caller's "stop" never needs a second
// thread. Requests reuse idle keep-alive connections; streams get their own.
#include <openssl/ssl.h>

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <limits>
#include <mutex>
#include <vector>

#include "workers/kubernetes/api_client.h"

namespace muster::workers::kubernetes {

namespace {

namespace beast = boost::beast;
namespace http = beast::http;
namespace asio = boost::asio;
namespace ssl = asio::ssl;
using tcp = asio::ip::tcp;
using namespace std::chrono_literals;

struct Connection {
  explicit Connection(ssl::context& ctx) : stream(ioc, ctx) {}
  asio::io_context ioc;
  beast::ssl_stream<beast::tcp_stream> stream;
  beast::flat_buffer buffer;

  // Runs one asynchronous operation started by `start` to its end.
  template <class Start>
  beast::error_code run(Start start) {
    beast::error_code result;
    bool done = false;
    start([&](beast::error_code ec, auto&&...) {
      result = ec;
      done = true;
    });
    ioc.restart();
    while (!done && ioc.run_one() > 0) {
    }
    return result;
  }
  void close() {
    beast::error_code ignored;
    beast::get_lowest_layer(stream).socket().close(ignored);
  }
};

// An error of a kept connection the server had closed while it was idle.
bool stale(const beast::error_code& ec) {
  return ec == http::error::end_of_stream || ec == asio::error::eof || ec == asio::error::connection_reset ||
         ec == asio::error::broken_pipe || ec == ssl::error::stream_truncated;
}

class BeastApiClient final : public ApiClient {
 public:
  explicit BeastApiClient(ClusterConnection c) : c_(std::move(c)), ctx_(ssl::context::tls_client) {}

  api::Status init() {
    beast::error_code ec;
    if (c_.ca_pem.empty()) {
      ctx_.set_default_verify_paths(ec);
    } else {
      ctx_.add_certificate_authority(asio::buffer(c_.ca_pem), ec);
    }
    if (ec) return api::invalid_argument("the cluster's CA certificate cannot be read: " + ec.message(), "ca_file");
    if (!c_.client_cert_pem.empty()) {
      ctx_.use_certificate_chain(asio::buffer(c_.client_cert_pem), ec);
      if (ec) return api::invalid_argument("the client certificate cannot be read: " + ec.message(), "kubeconfig");
      ctx_.use_private_key(asio::buffer(c_.client_key_pem), ssl::context::pem, ec);
      if (ec) return api::invalid_argument("the client key cannot be read: " + ec.message(), "kubeconfig");
    }
    ctx_.set_verify_mode(ssl::verify_peer);
    return api::Status::ok();
  }

  api::Result<HttpReply> request(const std::string& method, const std::string& path, const std::string& body,
                                 const std::string& content_type) override {
    auto req = make_request(method, path, body, content_type);
    for (int attempt = 0; attempt < 2; ++attempt) {
      bool reused = false;
      std::string error;
      auto conn = take(&reused, &error);
      if (!conn) return api::unavailable(error);
      auto& tcp_layer = beast::get_lowest_layer(conn->stream);
      tcp_layer.expires_after(std::chrono::milliseconds(c_.timeout_ms));
      beast::error_code ec = conn->run([&](auto h) { http::async_write(conn->stream, req, h); });
      http::response_parser<http::string_body> parser;
      parser.body_limit(std::numeric_limits<std::uint64_t>::max());
      if (!ec) ec = conn->run([&](auto h) { http::async_read(conn->stream, conn->buffer, parser, h); });
      if (ec) {
        if (reused && stale(ec)) continue;  // the server closed it while idle: once more, afresh
        return api::unavailable(where() + ": " + method + " " + path + ": " + ec.message());
      }
      auto res = parser.release();
      HttpReply reply{static_cast<int>(res.result_int()), std::move(res.body())};
      if (res.keep_alive()) give_back(std::move(conn));
      return reply;
    }
    return api::unavailable(where() + ": " + method + " " + path + ": the connection was closed twice");
  }

  api::Status stream(const std::string& path, const std::function<bool(std::string_view)>& on_chunk) override {
    std::string error;
    auto conn = connect(&error);
    if (!conn) return api::unavailable(error);
    auto req = make_request("GET", path, "", "");
    req.keep_alive(false);
    auto& tcp_layer = beast::get_lowest_layer(conn->stream);
    tcp_layer.expires_after(std::chrono::milliseconds(c_.timeout_ms));
    beast::error_code ec = conn->run([&](auto h) { http::async_write(conn->stream, req, h); });
    http::response_parser<http::buffer_body> parser;
    parser.body_limit(std::numeric_limits<std::uint64_t>::max());
    if (!ec) ec = conn->run([&](auto h) { http::async_read_header(conn->stream, conn->buffer, parser, h); });
    if (ec) return api::unavailable(where() + ": GET " + path + ": " + ec.message());
    tcp_layer.expires_never();
    const int status = static_cast<int>(parser.get().result_int());
    std::string error_body;
    char chunk[16384];
    while (!parser.is_done()) {
      parser.get().body().data = chunk;
      parser.get().body().size = sizeof chunk;
      beast::error_code read_ec;
      bool done = false;
      http::async_read_some(conn->stream, conn->buffer, parser, [&](beast::error_code e, std::size_t) {
        read_ec = e;
        done = true;
      });
      conn->ioc.restart();
      while (!done) {
        conn->ioc.run_for(250ms);
        if (!done && status / 100 == 2 && !on_chunk({})) {
          conn->close();
          while (!done && conn->ioc.run_one() > 0) {
          }
          return api::Status::ok();
        }
        if (conn->ioc.stopped()) conn->ioc.restart();
      }
      if (read_ec == http::error::need_buffer) read_ec = {};
      const size_t got = sizeof chunk - parser.get().body().size;
      if (status / 100 != 2) {
        if (error_body.size() < 65536) error_body.append(chunk, got);
      } else if (got > 0 && !on_chunk(std::string_view(chunk, got))) {
        conn->close();
        return api::Status::ok();
      }
      if (read_ec) {
        if (stale(read_ec) && status / 100 == 2) break;  // the server ended the stream
        return api::unavailable(where() + ": GET " + path + ": " + read_ec.message());
      }
    }
    conn->close();
    if (status / 100 != 2) {
      return api::unavailable(where() + ": GET " + path + ": HTTP " + std::to_string(status) + ": " + error_body);
    }
    return api::Status::ok();
  }

 private:
  std::string where() const { return "the Kubernetes API server " + c_.host + ":" + std::to_string(c_.port); }

  http::request<http::string_body> make_request(const std::string& method, const std::string& path,
                                                const std::string& body, const std::string& content_type) const {
    http::request<http::string_body> req{http::string_to_verb(method), path, 11};
    req.set(http::field::host, c_.host);
    req.set(http::field::user_agent, "musterd");
    req.set(http::field::accept, "application/json");
    if (!c_.token.empty()) req.set(http::field::authorization, "Bearer " + c_.token);
    if (!body.empty()) req.set(http::field::content_type, content_type);
    req.body() = body;
    req.keep_alive(true);
    req.prepare_payload();
    return req;
  }

  std::unique_ptr<Connection> connect(std::string* error) {
    auto conn = std::make_unique<Connection>(ctx_);
    const std::string where_to = where();
    beast::error_code ec;
    tcp::resolver resolver(conn->ioc);
    auto endpoints = resolver.resolve(c_.host, std::to_string(c_.port), ec);
    if (ec) return fail(error, where_to + ": cannot resolve " + c_.host + ": " + ec.message());
    auto& tcp_layer = beast::get_lowest_layer(conn->stream);
    tcp_layer.expires_after(std::chrono::milliseconds(c_.timeout_ms));
    ec = conn->run([&](auto h) { tcp_layer.async_connect(endpoints, h); });
    if (ec) return fail(error, where_to + ": cannot connect: " + ec.message());
    // SNI for names; the certificate is checked against the name or address.
    beast::error_code addr_ec;
    asio::ip::make_address(c_.host, addr_ec);
    if (addr_ec) SSL_set_tlsext_host_name(conn->stream.native_handle(), c_.host.c_str());
    conn->stream.set_verify_callback(ssl::host_name_verification(c_.host));
    ec = conn->run([&](auto h) { conn->stream.async_handshake(ssl::stream_base::client, h); });
    if (ec) {
      return fail(error, where_to + ": TLS: " + ec.message() +
                  " (is ca_file the cluster's CA, and does the server's certificate name " + c_.host + "?)");
    }
    return conn;
  }

  static std::unique_ptr<Connection> fail(std::string* error, std::string why) {
    *error = std::move(why);
    return nullptr;
  }

  std::unique_ptr<Connection> take(bool* reused, std::string* error) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!idle_.empty()) {
        auto conn = std::move(idle_.back());
        idle_.pop_back();
        *reused = true;
        return conn;
      }
    }
    *reused = false;
    return connect(error);
  }

  void give_back(std::unique_ptr<Connection> conn) {
    std::lock_guard<std::mutex> lock(mu_);
    if (idle_.size() < 8) idle_.push_back(std::move(conn));
  }

  ClusterConnection c_;
  ssl::context ctx_;
  std::mutex mu_;
  std::vector<std::unique_ptr<Connection>> idle_;
};

}  // namespace

api::Result<std::unique_ptr<ApiClient>> make_beast_api_client(ClusterConnection connection) {
  auto client = std::make_unique<BeastApiClient>(std::move(connection));
  if (auto s = client->init(); !s) return s;
  return std::unique_ptr<ApiClient>(std::move(client));
}

}  // namespace muster::workers::kubernetes
