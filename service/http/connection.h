// Connection: one client's TCP connection, from accept to close, over plain
// TCP or TLS (StreamConnection<Stream>: the same steps over either stream).
//
// The steps of one request, all on the connection's strand (no handler code
// runs there, and nothing there waits):
//  a) wait for the request's first byte (idle_timeout on a keep-alive
//     connection), then read the request line and headers within
//     read_timeout of that byte (over max_header_bytes: 431, close);
//  b) from the headers alone: match the route (404/405), check the
//     credentials (401/403) and the Content-Length (413); each of these
//     answers without reading the body, and closes the connection when a
//     body was announced;
//  c) read the body (Content-Length or chunked) within the same deadline,
//     at most max_body_bytes (413 as soon as it is exceeded), and parse it
//     as JSON (400); a GET's body is read and ignored;
//  d) hand the Request to its route's lane (agent routes have their own
//     handler threads; 503 when the lane's queue is full) and wait,
//     without a deadline, for the handler's Reply, which may come from any
//     thread at any later time;
//  e) write the response (within idle_timeout); then the next request on a
//     keep-alive connection (pipelined bytes are already buffered), or close.
//     A streamed response (Response::stream) sends its headers and chunks as
//     they are written and ends the connection with the stream; while it
//     streams, the connection reads only to notice the client leaving.
// Over TLS, a) starts with the handshake, within read_timeout of the accept:
// a client that never finishes it (silence, garbage bytes, plain HTTP on the
// TLS port) is disconnected when it passes, and holds no thread meanwhile.
// A TLS connection ends without close_notify (the socket is closed, as for
// plain TCP): every response is delimited by its length or its last chunk.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>

#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/ssl/ssl_stream.hpp>
#include <boost/beast/http/empty_body.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/string_body.hpp>

#include "service/http/context.h"
#include "service/http/stream.h"

namespace muster::service::http {

// What the server and the handlers' replies see of a connection.
class Connection : public std::enable_shared_from_this<Connection> {
 public:
  virtual ~Connection() = default;
  // Starts reading the first request (on the connection's strand).
  virtual void start() = 0;
  // Closes the socket and any stream; from any thread.
  virtual void close() = 0;
  // Answers the request being handled; from any thread (through the gate).
  virtual void deliver(Response response) = 0;
};

using PlainStream = boost::beast::tcp_stream;
using TlsStream = boost::beast::ssl_stream<boost::beast::tcp_stream>;

// A connection on an accepted socket: TLS when the server has a TLS context.
std::shared_ptr<Connection> make_connection(boost::asio::ip::tcp::socket socket, std::shared_ptr<ServerContext> ctx);

// Stream: PlainStream or TlsStream (both instantiated in connection.cc).
template <class Stream>
class StreamConnection final : public Connection {
 public:
  StreamConnection(boost::asio::ip::tcp::socket socket, std::shared_ptr<ServerContext> ctx);
  ~StreamConnection() override;

  void start() override;
  void close() override;
  void deliver(Response response) override;

 private:
  static constexpr bool kTls = std::is_same_v<Stream, TlsStream>;
  std::shared_ptr<StreamConnection> shared() {
    return std::static_pointer_cast<StreamConnection>(shared_from_this());
  }
  std::weak_ptr<StreamConnection> weak_self() { return shared(); }
  auto& tcp() { return boost::beast::get_lowest_layer(stream_); }
  void handshake();
  using error_code = boost::system::error_code;
  void wait_for_request();
  void read_header();
  void on_header(error_code ec);
  void read_body();
  void on_body(error_code ec);
  void dispatch(const Route* route, Request request);
  void respond(Response response);
  void respond_and_close(Response response) {
    keep_alive_ = false;
    respond(std::move(response));
  }
  void on_written(error_code ec);
  void linger(size_t discarded);
  void start_stream(Response response);
  void watch_client();
  void pump();
  void shutdown();  // on the strand

  std::shared_ptr<ServerContext> ctx_;
  Stream stream_;
  boost::beast::flat_buffer buffer_;
  std::string remote_address_;
  std::optional<boost::beast::http::request_parser<boost::beast::http::empty_body>> header_parser_;
  std::optional<boost::beast::http::request_parser<boost::beast::http::string_body>> body_parser_;
  // The request being read, and its route.
  Request request_;
  const Route* route_ = nullptr;
  std::chrono::steady_clock::time_point request_start_;  // headers read (for on_response)
  std::string request_method_;                           // "" until a request's headers are read
  bool keep_alive_ = true;
  // The response being written.
  std::string out_;
  std::shared_ptr<void> out_message_;
  // Streaming.
  std::shared_ptr<ChunkedStream> chunked_;
  bool writing_ = false;
  char discard_[16384];
  bool closed_ = false;
};

}  // namespace muster::service::http
