#include "service/http/connection.h"

#include <algorithm>
#include <cctype>
#include <limits>

#include <boost/asio/post.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/status.hpp>
#include <boost/beast/http/write.hpp>
#include <spdlog/spdlog.h>

#include "service/http/target.h"

namespace muster::service::http {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;

namespace {

// Reply's shared state: the first call answers, later calls are ignored,
// and a Reply dropped without being called answers 500 (so a handler bug
// never leaves a client waiting forever).
struct ReplySlot {
  std::weak_ptr<Connection> connection;
  std::atomic<bool> done{false};
  explicit ReplySlot(std::weak_ptr<Connection> c) : connection(std::move(c)) {}
  void send(Response r) {
    if (done.exchange(true)) return;
    if (auto c = connection.lock()) c->deliver(std::move(r));
  }
  ~ReplySlot() {
    if (done.load()) return;
    if (auto c = connection.lock()) {
      c->deliver(error_response(api::internal_error("the handler of this route ended without replying")));
    }
  }
};

bool is_protocol_error(const boost::system::error_code& ec) {
  return ec.category() == bhttp::make_error_code(bhttp::error::bad_target).category() &&
         ec != bhttp::error::end_of_stream && ec != bhttp::error::partial_message;
}

Response too_large(const std::string& what, size_t limit) {
  return error_response(api::Status(api::ErrorCode::kPayloadTooLarge,
                                    what + " is larger than " + std::to_string(limit) + " bytes"));
}

Response headers_too_large(size_t limit) {
  Response r = json_response(431, {{"error",
                                    {{"code", "request_header_fields_too_large"},
                                     {"message", "the request line and headers are larger than " +
                                                     std::to_string(limit) + " bytes"}}}});
  return r;
}

std::string lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(), [](unsigned char c) { return std::tolower(c); });
  return out;
}

constexpr const char kContinue[] = "HTTP/1.1 100 Continue\r\n\r\n";

}  // namespace

template <class Stream>
Stream open_stream(net::ip::tcp::socket socket, ServerContext& ctx) {
  if constexpr (std::is_same_v<Stream, TlsStream>) {
    return Stream(std::move(socket), *ctx.tls);
  } else {
    return Stream(std::move(socket));
  }
}

std::shared_ptr<Connection> make_connection(net::ip::tcp::socket socket, std::shared_ptr<ServerContext> ctx) {
  if (ctx->tls) return std::make_shared<StreamConnection<TlsStream>>(std::move(socket), std::move(ctx));
  return std::make_shared<StreamConnection<PlainStream>>(std::move(socket), std::move(ctx));
}

template <class Stream>
StreamConnection<Stream>::StreamConnection(net::ip::tcp::socket socket, std::shared_ptr<ServerContext> ctx)
    : ctx_(std::move(ctx)), stream_(open_stream<Stream>(std::move(socket), *ctx_)) {
  boost::system::error_code ec;
  const auto peer = tcp().socket().remote_endpoint(ec);
  if (!ec) remote_address_ = peer.address().to_string();
}

template <class Stream>
StreamConnection<Stream>::~StreamConnection() = default;

template <class Stream>
void StreamConnection<Stream>::start() {
  net::post(stream_.get_executor(), [self = shared()] {
    if constexpr (kTls) {
      self->handshake();
    } else {
      self->wait_for_request();
    }
  });
}

// TLS, before a): the handshake within read_timeout of the accept.
template <class Stream>
void StreamConnection<Stream>::handshake() {
  if constexpr (kTls) {
    tcp().expires_after(ctx_->options.read_timeout);
    stream_.async_handshake(boost::asio::ssl::stream_base::server, [self = shared()](beast::error_code ec) {
      if (ec) {
        spdlog::debug("TLS handshake with {} failed: {}", self->remote_address_, ec.message());
        return self->shutdown();
      }
      self->wait_for_request();
    });
  }
}

template <class Stream>
void StreamConnection<Stream>::close() {
  net::post(stream_.get_executor(), [self = shared()] { self->shutdown(); });
}

template <class Stream>
void StreamConnection<Stream>::deliver(Response response) {
  auto self = shared();
  ctx_->gate.run([&] {
    net::post(stream_.get_executor(), [self, r = std::move(response)]() mutable { self->respond(std::move(r)); });
  });
}

template <class Stream>
void StreamConnection<Stream>::shutdown() {
  if (closed_) return;
  auto self = shared();
  closed_ = true;
  if (chunked_) chunked_->abort();
  boost::system::error_code ec;
  tcp().socket().shutdown(net::ip::tcp::socket::shutdown_both, ec);
  tcp().close();
  ctx_->remove_connection(this);
}

// a) Wait (idle_timeout) for the first byte of the next request.
template <class Stream>
void StreamConnection<Stream>::wait_for_request() {
  if (closed_) return;
  if (buffer_.size() > 0) return read_header();  // pipelined
  tcp().expires_after(ctx_->options.idle_timeout);
  stream_.async_read_some(buffer_.prepare(4096), [self = shared()](beast::error_code ec, size_t n) {
    if (ec) return self->shutdown();
    self->buffer_.commit(n);
    self->read_header();
  });
}

template <class Stream>
void StreamConnection<Stream>::read_header() {
  header_parser_.emplace();
  header_parser_->header_limit(static_cast<std::uint32_t>(ctx_->options.max_header_bytes));
  // Checked in on_header and by the body parser (not boost::none: Beast
  // 1.74 compares a length with an empty optional as "over the limit").
  header_parser_->body_limit(std::numeric_limits<std::uint64_t>::max());
  request_ = Request{};
  request_method_.clear();
  route_ = nullptr;
  keep_alive_ = true;
  tcp().expires_after(ctx_->options.read_timeout);
  bhttp::async_read_header(stream_, buffer_, *header_parser_,
                           [self = shared()](beast::error_code ec, size_t) { self->on_header(ec); });
}

// b) Route, credentials and declared size, from the headers alone.
template <class Stream>
void StreamConnection<Stream>::on_header(beast::error_code ec) {
  if (ec == bhttp::error::header_limit) return respond_and_close(headers_too_large(ctx_->options.max_header_bytes));
  if (ec && is_protocol_error(ec)) {
    return respond_and_close(error_response(api::invalid_argument("malformed HTTP request: " + ec.message())));
  }
  if (ec) return shutdown();  // timeout, the client left, or the server stops
  const auto& msg = header_parser_->get();
  request_start_ = std::chrono::steady_clock::now();
  request_.received = request_start_;
  request_.method = std::string(msg.method_string());
  request_method_ = request_.method;
  auto target = split_target(std::string_view(msg.target().data(), msg.target().size()));
  request_.path = std::move(target.path);
  request_.query = std::move(target.query);
  request_.remote_address = remote_address_;
  for (const auto& field : msg) {
    auto [it, inserted] = request_.headers.emplace(lower(std::string_view(field.name_string().data(), field.name_string().size())),
                                                           std::string(field.value()));
    if (!inserted) it->second += ", " + std::string(field.value());
  }
  keep_alive_ = msg.keep_alive();
  const auto length = header_parser_->content_length();
  const bool has_body = header_parser_->chunked() || (length && *length > 0);
  // Answering without reading an announced body: the connection cannot be
  // reused (the body's bytes would be read as the next request).
  if (has_body) keep_alive_ = false;

  auto match = ctx_->router.match(request_.method, request_.path);
  if (!match) return respond(error_response(match.status()));
  route_ = match->route;
  request_.params = std::move(match->params);
  const auto id = request_.params.count("id") ? request_.params.at("id") : std::string();
  if (auto s = ctx_->auth.check(route_->auth, request_.headers, request_.method, id); !s) {
    return respond(error_response(s));
  }
  if (length && *length > ctx_->options.max_body_bytes) {
    return respond(too_large("the request body", ctx_->options.max_body_bytes));
  }
  if (!has_body) return dispatch(route_, std::move(request_));
  keep_alive_ = msg.keep_alive();
  const auto expect = request_.headers.find("expect");
  if (expect != request_.headers.end() && lower(expect->second) == "100-continue") {
    return net::async_write(stream_, net::buffer(kContinue, sizeof kContinue - 1),
                            [self = shared()](beast::error_code ec, size_t) {
                              if (ec) return self->shutdown();
                              self->read_body();
                            });
  }
  read_body();
}

// c) The body, within the same deadline and at most max_body_bytes.
template <class Stream>
void StreamConnection<Stream>::read_body() {
  body_parser_.emplace(std::move(*header_parser_));
  header_parser_.reset();
  body_parser_->body_limit(ctx_->options.max_body_bytes);
  bhttp::async_read(stream_, buffer_, *body_parser_,
                    [self = shared()](beast::error_code ec, size_t) { self->on_body(ec); });
}

template <class Stream>
void StreamConnection<Stream>::on_body(beast::error_code ec) {
  if (ec == bhttp::error::body_limit) {
    return respond_and_close(too_large("the request body", ctx_->options.max_body_bytes));
  }
  if (ec && is_protocol_error(ec)) {
    return respond_and_close(error_response(api::invalid_argument("malformed HTTP request body: " + ec.message())));
  }
  if (ec) return shutdown();
  std::string raw = std::move(body_parser_->get().body());
  body_parser_.reset();
  if (request_.method != "GET" && request_.method != "HEAD" && !raw.empty()) {
    request_.body = nlohmann::json::parse(raw.begin(), raw.end(), nullptr, /*allow_exceptions=*/false);
    if (request_.body.is_discarded()) {
      return respond(error_response(api::invalid_argument("the request body is not valid JSON (UTF-8)")));
    }
  }
  dispatch(route_, std::move(request_));
}

// d) To the route's lane of handler threads, or run here for an inline
// route; the Reply comes back through deliver().
template <class Stream>
void StreamConnection<Stream>::dispatch(const Route* route, Request request) {
  tcp().expires_never();
  auto slot = std::make_shared<ReplySlot>(weak_from_this());
  Reply reply = [slot](Response r) { slot->send(std::move(r)); };
  auto run = [route, request = std::move(request), reply]() {
    try {
      route->handler(request, reply);
    } catch (const std::exception& e) {
      spdlog::error("{} {}: {}", request.method, request.path, e.what());
      reply(error_response(api::internal_error(std::string("internal error: ") + e.what())));
    }
  };
  // Inline: on this I/O thread, for a handler that never blocks (router.h).
  if (route->lane == Lane::kInline) return run();
  const bool queued = ctx_->lane_of(*route).post(std::move(run));
  if (!queued) {
    reply(error_response(api::unavailable("musterd is busy: too many requests wait for a handler; retry later")));
  }
}

// e) The response.
template <class Stream>
void StreamConnection<Stream>::respond(Response response) {
  if (closed_) return;
  if (ctx_->options.on_response && !request_method_.empty()) {
    ctx_->options.on_response(request_method_, route_ ? route_->pattern : std::string(), response.http_status,
                              std::chrono::duration<double>(std::chrono::steady_clock::now() - request_start_).count());
  }
  if (response.stream) return start_stream(std::move(response));
  auto res = std::make_shared<bhttp::response<bhttp::string_body>>();
  res->version(11);
  res->result(static_cast<unsigned>(response.http_status));
  if (response.http_status != 204 && response.http_status != 304) {
    res->set(bhttp::field::content_type, response.content_type);
    res->body() = std::move(response.body);
  }
  for (auto& [name, value] : response.headers) res->insert(name, value);
  // Over the kept-connection budget (options.h): this client reconnects for
  // its next request, and the daemon stays within its file limit.
  if (keep_alive_ && ctx_->connection_count() > ctx_->options.kept_connections()) keep_alive_ = false;
  res->keep_alive(keep_alive_);
  res->prepare_payload();
  out_message_ = res;
  tcp().expires_after(ctx_->options.idle_timeout);
  bhttp::async_write(stream_, *res, [self = shared()](beast::error_code ec, size_t) {
    self->out_message_.reset();
    self->on_written(ec);
  });
}

template <class Stream>
void StreamConnection<Stream>::on_written(beast::error_code ec) {
  if (ec || closed_) return shutdown();
  if (keep_alive_) return wait_for_request();
  // Close gracefully: FIN first, then discard what the client still sends
  // (a body we refused), up to max_drain_bytes within read_timeout, so that
  // it reads our answer instead of a reset (nginx's lingering close).
  boost::system::error_code ignored;
  tcp().socket().shutdown(net::ip::tcp::socket::shutdown_send, ignored);
  tcp().expires_after(ctx_->options.read_timeout);
  linger(0);
}

template <class Stream>
void StreamConnection<Stream>::linger(size_t discarded) {
  stream_.async_read_some(net::buffer(discard_), [self = shared(), discarded](beast::error_code ec, size_t n) {
    if (ec || discarded + n > self->ctx_->options.max_drain_bytes) return self->shutdown();
    self->linger(discarded + n);
  });
}

template class StreamConnection<PlainStream>;
template class StreamConnection<TlsStream>;

}  // namespace muster::service::http
