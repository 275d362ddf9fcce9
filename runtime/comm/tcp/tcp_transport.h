// The TCP transport of one rank's ring: the sender to its right neighbour
// and/or the receiver from its left one (either may be absent when that
// neighbour is reached through shared memory), the SendLink/RecvLink views
// the ring uses, and a Sleeper for the ring's idle waits.
//
// Progress, two modes:
//  - inline (io_thread false): sockets only move when the progress thread
//    calls into them: every try_recv() also pushes the sender's queue, so a
//    rank waiting for its left neighbour keeps feeding its right one (two
//    ranks each waiting to receive while holding the other's data would
//    otherwise deadlock once the socket buffers fill); idle, it waits in
//    ppoll on the streams.
//  - I/O thread (io_thread true): the links only queue sends and announce
//    receives; a thread of this transport does every sendmsg/readv, waiting
//    in ppoll on the streams and an eventfd the links kick, so the kernel's
//    queues keep moving while the progress thread reduces or is descheduled.
//    An error it meets (peer gone, bad frame) is kept and thrown by the
//    progress thread's next link call. Idle, the progress thread waits on a
//    condition variable the I/O thread signals when a frame completes.
//    The thread stops and is joined in the destructor.
//
// Threads: the link views, abort() and the Sleeper calls: the progress
// thread only (the I/O thread shares the sender/receiver under a mutex).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>

#include "runtime/comm/link.h"
#include "runtime/comm/tcp/receiver.h"
#include "runtime/comm/tcp/sender.h"
#include "runtime/comm/watchdog.h"

namespace muster::runtime::comm::tcp {

class TcpTransport : public Sleeper {
 public:
  // Either may be null.
  TcpTransport(std::unique_ptr<TcpSender> sender, std::unique_ptr<TcpReceiver> receiver, bool io_thread = false);
  ~TcpTransport() override;
  TcpTransport(const TcpTransport&) = delete;
  TcpTransport& operator=(const TcpTransport&) = delete;

  bool has_sender() const { return sender_ != nullptr; }
  bool has_receiver() const { return receiver_ != nullptr; }
  bool has_io_thread() const { return io_.joinable(); }
  // Views onto the sender / receiver; valid while this transport lives.
  std::unique_ptr<SendLink> send_link();
  std::unique_ptr<RecvLink> recv_link();

  // Tells the right neighbour this rank's op failed blaming `blamed`, and
  // closes the outgoing streams (see TcpSender::abort).
  void abort(int blamed) noexcept;

  // Sleeper: prepare() remembers the I/O thread's completion count; sleep()
  // waits until it moves (I/O thread) or in ppoll until a stream can move
  // (inline), or `max` passes.
  void prepare() override;
  void sleep(std::chrono::microseconds max) override;

  // The link views' calls (progress thread).
  bool link_try_send(const void* src, std::size_t bytes);
  bool link_flushed();
  void link_expect(void* dst, std::size_t bytes);  // dst null: into a slot
  const void* link_try_recv();
  void link_release();

 private:
  void io_loop();
  void kick_locked();        // wakes the I/O thread if it waits in ppoll
  void check_locked() const;  // throws the I/O thread's error

  std::unique_ptr<TcpSender> sender_;
  std::unique_ptr<TcpReceiver> receiver_;
  // I/O thread mode only.
  std::mutex mu_;
  std::condition_variable done_;  // a frame completed, or an error
  std::thread io_;
  int event_fd_ = -1;
  bool stop_ = false;
  bool io_waiting_ = false;
  uint64_t completions_ = 0, seen_ = 0;
  std::exception_ptr error_;
};

}  // namespace muster::runtime::comm::tcp
