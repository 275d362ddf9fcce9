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
// Who reads. Inline (no bell): try_recv() reads what the kernel holds.
// With I/O threads (a ProgressBell given): one thread per stream reads into
// every announced segment that has a slot as soon as it can and rings the
// bell when one is complete; try_recv() only looks, and rethrows a stream's
// failure (sender.h says why).
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

class TcpReceiver {
 public:
  TcpReceiver(std::vector<Socket> streams, int peer, std::size_t segment_bytes, std::size_t slots,
              std::shared_ptr<ProgressBell> bell = nullptr);
  ~TcpReceiver();
  TcpReceiver(const TcpReceiver&) = delete;
  TcpReceiver& operator=(const TcpReceiver&) = delete;

  void expect(std::size_t bytes);
  // Segment received straight into `dst` instead of a slot.
  void expect_into(void* dst, std::size_t bytes);
  // The oldest expected segment's payload once all of it is in, else nullptr.
  const void* try_recv();
  void release();
  // Inline: reads what the kernel holds. With I/O threads: nothing.
  void progress();
  // Inline: POLLIN for every stream with a slot waiting for data.
  void add_poll(std::vector<pollfd>* fds) const;
  int peer() const { return peer_; }
  bool io_threads() const { return bell_ != nullptr; }

 private:
  struct Expected {
    uint64_t index;
    std::size_t bytes;
    std::size_t got = 0;  // of sizeof(FrameHeader) + bytes
    FrameHeader header;
    char* dst = nullptr;  // receive here instead of the slot
  };
  // One readv into the stream's announced, slotted, incomplete segments.
  // Returns how many it completed (*more: the kernel may hold more), or a
  // negative code: nothing was there, or nothing is announced.
  int read_once(std::size_t s, bool* more);
  bool has_work_locked(std::size_t s) const;  // a slotted segment of stream s is incomplete
  void read_stream(std::size_t s);  // inline: read_once until it runs dry
  void io_loop(std::size_t s);      // an I/O thread
  void check_header(const Expected& e, std::size_t s) const;
  char* target(const Expected& e) const { return e.dst ? e.dst : buffers_ + (e.index % slots_) * segment_bytes_; }
  // Announced segments that have a slot: the first `slots_` of expected_.
  std::size_t window() const { return expected_.size() < slots_ ? expected_.size() : slots_; }

  std::vector<Socket> streams_;
  int peer_;
  std::size_t segment_bytes_;
  std::size_t slots_;
  char* buffers_ = nullptr;  // slots_ * segment_bytes_, 64-byte aligned
  std::deque<Expected> expected_;  // entries keep their address while others come and go
  uint64_t next_index_ = 0;

  // With I/O threads: io_.mu guards expected_ (and every `got`).
  std::shared_ptr<ProgressBell> bell_;
  IoThreads io_;
};

}  // namespace muster::runtime::comm::tcp
