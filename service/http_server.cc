#include "muster/service/http_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>

#include <cpprest/http_listener.h>
#include <cpprest/producerconsumerstream.h>
#include <spdlog/spdlog.h>

namespace muster::service {

using web::http::http_request;
using web::http::http_response;

api::Result<int> pick_free_port(const std::string& host) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return api::internal_error("socket: " + std::string(std::strerror(errno)));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = 0;
  if (::inet_pton(AF_INET, host.c_str(), &addr.sin_addr) != 1) {
    ::close(fd);
    return api::invalid_argument("--listen host must be an IPv4 address, not '" + host + "'", "listen");
  }
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    ::close(fd);
    return api::unavailable("cannot bind " + host + ": " + std::strerror(errno));
  }
  socklen_t len = sizeof addr;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  ::close(fd);
  return static_cast<int>(ntohs(addr.sin_port));
}

HttpServer::HttpServer(HttpServerOptions options, const Router& router, const Authenticator& auth)
    : options_(std::move(options)), router_(router), auth_(auth) {}

HttpServer::~HttpServer() { stop(); }

std::string HttpServer::url() const { return "http://" + options_.host + ":" + std::to_string(options_.port); }

namespace {

// A streamed body over cpprest: a producer/consumer buffer the listener
// reads from (chunked, no Content-Length). A client that is gone fails the
// reply task (closed); one that has more than kMaxQueued bytes unread has
// fallen behind and is closed too.
class CpprestStream final : public Stream {
 public:
  static constexpr size_t kMaxQueued = 8 << 20;
  bool write(std::string chunk) override {
    if (closed()) return false;
    if (buf_.in_avail() + chunk.size() > kMaxQueued) {
      close();
      return false;
    }
    buf_.putn_nocopy(reinterpret_cast<const uint8_t*>(chunk.data()), chunk.size()).get();
    // Without a sync the listener waits for a whole read block (or the end).
    buf_.sync().get();
    return true;
  }
  void close() override {
    if (!closed_.exchange(true)) buf_.close(std::ios_base::out).wait();
  }
  bool closed() const override { return closed_; }
  concurrency::streams::producer_consumer_buffer<uint8_t>& buffer() { return buf_; }

 private:
  concurrency::streams::producer_consumer_buffer<uint8_t> buf_;
  std::atomic<bool> closed_{false};
};

void send(http_request& req, const Response& r) {
  http_response resp(static_cast<web::http::status_code>(r.http_status));
  for (const auto& [name, value] : r.headers) resp.headers().add(name, value);
  if (r.stream) {
    auto stream = std::make_shared<CpprestStream>();
    if (!r.body.empty()) stream->write(r.body);
    resp.set_body(stream->buffer().create_istream(), r.content_type);
    req.reply(resp).then([stream](pplx::task<void> t) {
      try {
        t.get();
      } catch (const std::exception& e) {
        spdlog::debug("streamed reply ended (client gone?): {}", e.what());
      }
      stream->close();
    });
    r.stream(stream);
    return;
  }
  if (r.http_status != 204) resp.set_body(r.body, r.content_type);
  req.reply(resp).then([](pplx::task<void> t) {
    try {
      t.get();
    } catch (const std::exception& e) {
      spdlog::debug("reply failed (client gone?): {}", e.what());
    }
  });
}

void handle(const HttpServerOptions& options, const Router& router, const Authenticator& auth, http_request req) {
  const std::string method = req.method();
  const std::string path = web::uri::decode(req.relative_uri().path());
  try {
    const auto& headers = req.headers();
    if (headers.has("Content-Length") && headers.content_length() > options.max_body_bytes) {
      return send(req, error_response(api::Status(api::ErrorCode::kPayloadTooLarge,
                                                  "the request body is larger than " +
                                                      std::to_string(options.max_body_bytes) + " bytes")));
    }
    auto match = router.match(method, path);
    if (!match) return send(req, error_response(match.status()));
    Request request;
    request.method = method;
    request.path = path;
    request.params = match->params;
    for (const auto& [k, v] : web::uri::split_query(req.relative_uri().query())) {
      request.query[web::uri::decode(k)] = web::uri::decode(v);
    }
    std::string authorization;
    if (headers.has("Authorization")) authorization = headers.find("Authorization")->second;
    const auto id = request.params.count("id") ? request.params.at("id") : std::string();
    if (auto s = auth.check(match->route->auth, authorization, id); !s) return send(req, error_response(s));

    const std::vector<unsigned char> raw = req.extract_vector().get();
    if (raw.size() > options.max_body_bytes) {
      return send(req, error_response(api::Status(api::ErrorCode::kPayloadTooLarge,
                                                  "the request body is larger than " +
                                                      std::to_string(options.max_body_bytes) + " bytes")));
    }
    if (!raw.empty()) {
      request.body = nlohmann::json::parse(raw.begin(), raw.end(), nullptr, /*allow_exceptions=*/false);
      if (request.body.is_discarded()) {
        return send(req, error_response(api::invalid_argument("the request body is not valid JSON (UTF-8)")));
      }
    }
    auto shared = std::make_shared<http_request>(std::move(req));
    match->route->handler(request, [shared](Response r) { send(*shared, r); });
  } catch (const std::exception& e) {
    spdlog::error("{} {}: {}", method, path, e.what());
    send(req, error_response(api::internal_error(std::string("internal error: ") + e.what())));
  }
}

}  // namespace

api::Status HttpServer::start() {
  using web::http::experimental::listener::http_listener;
  try {
    listener_ = std::make_unique<http_listener>(web::uri(url()));
    listener_->support([this](http_request req) { handle(options_, router_, auth_, std::move(req)); });
    listener_->open().wait();
  } catch (const std::exception& e) {
    listener_.reset();
    return api::unavailable("cannot listen on " + url() + ": " + e.what());
  }
  return api::Status::ok();
}

void HttpServer::stop() {
  if (!listener_) return;
  try {
    listener_->close().wait();
  } catch (const std::exception& e) {
    spdlog::warn("closing the listener: {}", e.what());
  }
  listener_.reset();
}

}  // namespace muster::service
