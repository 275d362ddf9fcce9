// The receiving half of a TCP ring link: segments from the left neighbour
// over one or more streams (segment i on stream i mod streams).
//
// expect() announces each segment's size in order; segment i is received
// into slot i mod `slots`, a buffer of `segment_bytes` (or, announced with
// expect_into(), straight into the caller's memory), once the segment
// `slots` before it has been released. Each stream is read with one readv
// across every announced segment that has a slot, so a call drains what the
// kernel holds, however many segments that is, while the ring reduces the
// oldest. Each frame's header is checked as soon as it is in: a wrong index
// or size (the ranks disagree on the op) throws CommError naming the peer
// instead of reading garbage; an abort frame throws CommError blaming the
// rank the peer blamed; end of stream or a reset while a segment is
// expected throws CommError naming the peer.
//
// Threads: the progress thread only.
#pragma once

#include <poll.h>

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <vector>

#include "runtime/comm/tcp/frame.h"
#include "runtime/comm/tcp/socket.h"

namespace muster::runtime::comm::tcp {

class TcpReceiver {
 public:
  TcpReceiver(std::vector<Socket> streams, int peer, std::size_t segment_bytes, std::size_t slots);
  ~TcpReceiver();

  void expect(std::size_t bytes);
  // Segment received straight into `dst` instead of a slot.
  void expect_into(void* dst, std::size_t bytes);
  // The oldest expected segment's payload once all of it is in, else nullptr.
  const void* try_recv();
  void release();
  void progress();
  // POLLIN for every stream with a slot waiting for data.
  void add_poll(std::vector<pollfd>* fds) const;
  int peer() const { return peer_; }

 private:
  struct Expected {
    uint64_t index;
    std::size_t bytes;
    std::size_t got = 0;  // of sizeof(FrameHeader) + bytes
    FrameHeader header;
    char* dst = nullptr;  // receive here instead of the slot
  };
  void read_stream(std::size_t s);
  void check_header(const Expected& e, std::size_t s) const;
  char* target(const Expected& e) const { return e.dst ? e.dst : buffers_ + (e.index % slots_) * segment_bytes_; }
  // Announced segments that have a slot: the first `slots_` of expected_.
  std::size_t window() const { return expected_.size() < slots_ ? expected_.size() : slots_; }

  std::vector<Socket> streams_;
  int peer_;
  std::size_t segment_bytes_;
  std::size_t slots_;
  char* buffers_ = nullptr;  // slots_ * segment_bytes_, 64-byte aligned
  std::deque<Expected> expected_;
  uint64_t next_index_ = 0;
};

}  // namespace muster::runtime::comm::tcp
