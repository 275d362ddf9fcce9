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
// Who writes. Inline (no bell): the caller's calls write what the sockets
// take. With I/O threads (a ProgressBell given): one thread per stream
// writes its frames as soon as they are queued and rings the bell as they
// leave; try_send() and flushed() only queue and look, and rethrow a
// stream's failure. The kernel's copy of each byte (and, between
// namespaces, the receiving side's TCP work) then runs beside the ring's
// reductions instead of between them (runtime/comm/README.md).
//
// Threads: the progress thread calls everything; the I/O threads are
// private.
#pragma once

#include <poll.h>

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <vector>

#include "runtime/comm/tcp/frame.h"
#include "runtime/comm/tcp/io_threads.h"
#include "runtime/comm/tcp/progress_bell.h"
#include "runtime/comm/tcp/socket.h"

namespace muster::runtime::comm::tcp {

class TcpSender {
 public:
  TcpSender(std::vector<Socket> streams, int peer, std::size_t in_flight,
            std::shared_ptr<ProgressBell> bell = nullptr);
  ~TcpSender();
  TcpSender(const TcpSender&) = delete;
  TcpSender& operator=(const TcpSender&) = delete;

  // Queues the next segment (false: queue full, nothing done) and writes
  // what the sockets take. `src` must stay unchanged until flushed().
  bool try_send(const void* src, std::size_t bytes);
  // True once every queued byte is in the kernel.
  bool flushed();
  // Inline: writes what the sockets take. With I/O threads: rethrows a
  // stream's failure, if any.
  void progress();
  // After a failure: stops the I/O threads, drops the queue, writes an abort
  // frame blaming `blamed` on every stream that sits between frames, and
  // shuts the streams down. Best effort, never blocks long or throws.
  void abort(int blamed) noexcept;
  // Inline: POLLOUT for every stream with bytes waiting.
  void add_poll(std::vector<pollfd>* fds) const;
  int peer() const { return peer_; }
  bool io_threads() const { return bell_ != nullptr; }
  // The smallest of the streams' round trips (round_trip_us), 0 if unknown.
  uint32_t round_trip_us() const;

 private:
  struct Frame {
    FrameHeader header;
    const char* data;
    std::size_t sent;  // of sizeof(header) + header.bytes
  };
  struct Stream {
    Socket socket;
    std::deque<Frame> queue;  // frames keep their address while others come and go
  };
  // One sendmsg of the stream's queued frames; pops the frames it finished.
  // Returns how many it finished, or -1 when the socket would block.
  int write_once(std::size_t s);
  void write_stream(std::size_t s);  // inline: write_once until it blocks
  void io_loop(std::size_t s);       // an I/O thread

  std::vector<Stream> streams_;
  int peer_;
  std::size_t in_flight_;
  std::size_t queued_ = 0;
  uint64_t next_index_ = 0;

  // With I/O threads: io_.mu guards the queues, queued_ and next_index_.
  std::shared_ptr<ProgressBell> bell_;
  IoThreads io_;
};

}  // namespace muster::runtime::comm::tcp
