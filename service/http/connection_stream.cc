// Connection, streamed responses (step e of connection.h): the status line
// and headers (chunked, Connection: close), `body` as the first chunk, then
// each chunk the producer writes, in order, from the ChunkedStream's queue.
#include <boost/asio/post.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/http/status.hpp>

#include "service/http/connection.h"

namespace muster::service::http {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;

template <class Stream>
void StreamConnection<Stream>::start_stream(Response response) {
  keep_alive_ = false;
  tcp().expires_never();
  const auto reason = bhttp::obsolete_reason(static_cast<bhttp::status>(response.http_status));
  out_ = "HTTP/1.1 " + std::to_string(response.http_status) + " " + std::string(reason) + "\r\n";
  out_ += "Content-Type: " + response.content_type + "\r\n";
  for (const auto& [name, value] : response.headers) out_ += name + ": " + value + "\r\n";
  out_ += "Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n";
  append_chunk(out_, response.body);

  // Producers reach the connection only through the gate, by a weak
  // reference: a stream kept by a producer does not keep the connection.
  std::weak_ptr<StreamConnection> weak = weak_self();
  auto ctx = ctx_;
  chunked_ = std::make_shared<ChunkedStream>(ctx_->options.max_stream_queue_bytes, [weak, ctx](bool drop) {
    auto self = weak.lock();
    if (!self) return;
    ctx->gate.run([&] {
      net::post(self->stream_.get_executor(), [self, drop] {
        if (drop) return self->shutdown();  // the client reads too slowly
        self->pump();
      });
    });
  });
  writing_ = true;
  net::async_write(stream_, net::buffer(out_), [self = shared()](beast::error_code ec, size_t) {
    self->writing_ = false;
    if (ec) return self->shutdown();
    self->pump();
  });
  watch_client();
  // The producer starts on a handler thread: it may read a file or take a
  // lock before its first write.
  auto start = std::move(response.stream);
  if (!ctx_->user_lane.post([start, stream = chunked_] { start(stream); })) shutdown();
}

// Reads while streaming only to notice the client leaving (EOF, reset).
template <class Stream>
void StreamConnection<Stream>::watch_client() {
  stream_.async_read_some(net::buffer(discard_), [self = shared()](beast::error_code ec, size_t) {
    if (ec) return self->shutdown();
    self->watch_client();
  });
}

template <class Stream>
void StreamConnection<Stream>::pump() {
  if (closed_ || writing_ || !chunked_) return;
  auto taken = chunked_->take();
  out_.clear();
  for (const auto& chunk : taken.chunks) append_chunk(out_, chunk);
  if (taken.ended) out_ += kLastChunk;
  if (out_.empty()) return;
  writing_ = true;
  net::async_write(stream_, net::buffer(out_),
                   [self = shared(), ended = taken.ended](beast::error_code ec, size_t) {
                     self->writing_ = false;
                     if (ec || ended) return self->shutdown();
                     self->pump();
                   });
}

// The members of this file, for both streams (the class is instantiated in
// connection.cc).
template void StreamConnection<PlainStream>::start_stream(Response);
template void StreamConnection<PlainStream>::watch_client();
template void StreamConnection<PlainStream>::pump();
template void StreamConnection<TlsStream>::start_stream(Response);
template void StreamConnection<TlsStream>::watch_client();
template void StreamConnection<TlsStream>::pump();

}  // namespace muster::service::http
