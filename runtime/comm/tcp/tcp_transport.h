// The TCP transport of one rank's ring: the sender to its right neighbour
// and/or the receiver from its left one (either may be absent when that
// neighbour is reached through shared memory), the SendLink/RecvLink views
// the ring uses, and a Sleeper that waits in ppoll on the streams.
//
// Progress, two ways (chosen at connect time, ring_bootstrap.h):
//  - inline: sockets only move when the progress thread calls into them:
//    every try_recv() also pushes the sender's queue, so a rank waiting for
//    its left neighbour keeps feeding its right one (two ranks each waiting
//    to receive while holding the other's data would otherwise deadlock once
//    the socket buffers fill), and sleep() waits in ppoll on the streams;
//  - I/O threads: the sender and receiver each run a thread per stream that
//    moves bytes as soon as it can and rings a ProgressBell; the progress
//    thread only queues, reduces and looks, and sleep() waits on the bell.
//    The kernel's TCP work then runs beside the reductions: on hosts with
//    cores to spare this is the faster way (bench/multihost), on hosts whose
//    ranks already share a few cores it adds wake-ups and loses.
//
// Threads: the progress thread (the I/O threads are the sender's and the
// receiver's own).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>

#include "runtime/comm/link.h"
#include "runtime/comm/tcp/progress_bell.h"
#include "runtime/comm/tcp/receiver.h"
#include "runtime/comm/tcp/sender.h"
#include "runtime/comm/watchdog.h"

namespace muster::runtime::comm::tcp {

class TcpTransport : public Sleeper {
 public:
  // Either may be null. `bell`: the one the sender and receiver were made
  // with when they run I/O threads, else null.
  TcpTransport(std::unique_ptr<TcpSender> sender, std::unique_ptr<TcpReceiver> receiver,
               std::shared_ptr<ProgressBell> bell = nullptr);

  bool has_sender() const { return sender_ != nullptr; }
  bool has_receiver() const { return receiver_ != nullptr; }
  // Views onto the sender / receiver; valid while this transport lives.
  std::unique_ptr<SendLink> send_link();
  std::unique_ptr<RecvLink> recv_link();

  // Tells the right neighbour this rank's op failed blaming `blamed`, and
  // closes the outgoing streams (see TcpSender::abort).
  void abort(int blamed) noexcept;

  // Sleeper. Inline: sleep() waits in ppoll until a stream can move (or
  // `max` passes). I/O threads: prepare() remembers the bell's generation
  // and sleep() waits for it to change.
  void prepare() override {
    if (bell_) seen_ = bell_->generation();
  }
  void sleep(std::chrono::microseconds max) override;
  bool io_threads() const { return bell_ != nullptr; }

  TcpSender* sender() { return sender_.get(); }
  TcpReceiver* receiver() { return receiver_.get(); }

 private:
  std::unique_ptr<TcpSender> sender_;
  std::unique_ptr<TcpReceiver> receiver_;
  std::shared_ptr<ProgressBell> bell_;
  uint64_t seen_ = 0;
};

}  // namespace muster::runtime::comm::tcp
