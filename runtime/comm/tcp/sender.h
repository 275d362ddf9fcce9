// The sending half of a TCP ring link: segments to the right neighbour over
// one or more streams (segment i on stream i mod streams).
//
// Zero-copy: a segment is queued as (header, pointer into the caller's
// buffer) and written with sendmsg straight from there, header and payload
// in one call, as many queued frames per call as the socket takes. At most
// `in_flight` segments wait in the queue; the kernel's socket buffer holds
// the rest of the pipeline. Errors (peer reset, peer gone, user timeout)
// throw CommError naming the peer rank.
//
// Threads: the progress thread only.
#pragma once

#include <poll.h>

#include <cstddef>
#include <cstdint>
#include <deque>
#include <vector>

#include "runtime/comm/tcp/frame.h"
#include "runtime/comm/tcp/socket.h"

namespace muster::runtime::comm::tcp {

class TcpSender {
 public:
  TcpSender(std::vector<Socket> streams, int peer, std::size_t in_flight);

  // Queues the next segment (false: queue full, nothing done) and writes
  // what the sockets take. `src` must stay unchanged until flushed().
  bool try_send(const void* src, std::size_t bytes);
  // Writes what the sockets take; true once every queued byte is in the kernel.
  bool flushed();
  void progress();
  // After a failure: drops the queue, writes an abort frame blaming `blamed`
  // on every stream that sits between frames, and shuts the streams down.
  // Best effort, never blocks or throws.
  void abort(int blamed) noexcept;
  // POLLOUT for every stream with bytes waiting.
  void add_poll(std::vector<pollfd>* fds) const;
  int peer() const { return peer_; }

 private:
  struct Frame {
    FrameHeader header;
    const char* data;
    std::size_t sent;  // of sizeof(header) + header.bytes
  };
  struct Stream {
    Socket socket;
    std::deque<Frame> queue;
  };
  void write_stream(std::size_t s);

  std::vector<Stream> streams_;
  int peer_;
  std::size_t in_flight_;
  std::size_t queued_ = 0;
  uint64_t next_index_ = 0;
};

}  // namespace muster::runtime::comm::tcp
