// Connection: one client's TCP connection, from accept to close.
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
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <optional>
#include <string>

#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http/empty_body.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/string_body.hpp>

#include "service/http/context.h"
#include "service/http/stream.h"

namespace muster::service::http {

class Connection : public std::enable_shared_from_this<Connection> {
 public:
  Connection(boost::asio::ip::tcp::socket socket, std::shared_ptr<ServerContext> ctx);
  ~Connection();

  // Starts reading the first request (on the connection's strand).
  void start();
  // Closes the socket and any stream; from any thread.
  void close();
  // Answers the request being handled; from any thread (through the gate).
  void deliver(Response response);

 private:
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
  boost::beast::tcp_stream stream_;
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
