// ChunkedStream: the server's Stream (router.h): a queue of chunks between
// a producer on any thread and the connection that sends them.
//
// Threads: write(), close() and closed() from any thread; take() and
// abort() by the connection on its strand. write() never blocks: it queues
// and, when the queue was empty, asks the connection (through `notify`) to
// send. A queue over `max_queued_bytes` means the client reads slower than
// the producer writes: the stream closes and the client is dropped, so a
// slow reader never makes the server buffer without bound.
#pragma once

#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <string>

#include "service/router.h"

namespace muster::service::http {

class ChunkedStream : public Stream {
 public:
  // `notify(drop)` is called outside the lock after a write into an empty
  // queue or a close (drop == false), or on overflow (drop == true).
  ChunkedStream(size_t max_queued_bytes, std::function<void(bool drop)> notify)
      : max_queued_bytes_(max_queued_bytes), notify_(std::move(notify)) {}

  bool write(std::string chunk) override;
  void close() override;
  bool closed() const override;
  size_t queued_bytes() const override;

  // The connection's side. take() moves the queued chunks into `out` and
  // says whether the producer has ended the stream (send the last chunk).
  struct Taken {
    std::deque<std::string> chunks;
    bool ended = false;
  };
  Taken take();
  // The client is gone or the server stops: closed() becomes true and
  // writes are refused.
  void abort();

 private:
  const size_t max_queued_bytes_;
  const std::function<void(bool)> notify_;
  mutable std::mutex mu_;
  std::deque<std::string> queue_;
  size_t queued_bytes_ = 0;
  bool closed_ = false;  // no more writes
  bool ended_ = false;   // closed by the producer: send the rest, then the last chunk
  bool notified_ = false;
};

// The bytes of one chunk of a chunked body ("<hex size>\r\n<data>\r\n").
void append_chunk(std::string& out, const std::string& data);
inline constexpr const char* kLastChunk = "0\r\n\r\n";

}  // namespace muster::service::http
