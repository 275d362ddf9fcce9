// The TCP transport of one rank's ring: the sender to its right neighbour
// and/or the receiver from its left one (either may be absent when that
// neighbour is reached through shared memory), the SendLink/RecvLink views
// the ring uses, and a Sleeper that waits in ppoll on the streams.
//
// Progress. Sockets only move when someone calls into them, and the progress
// thread is the only caller: every try_recv() also pushes the sender's queue,
// so a rank waiting for its left neighbour keeps feeding its right one (two
// ranks each waiting to receive while holding the other's data would
// otherwise deadlock once the socket buffers fill).
//
// Threads: the progress thread only.
#pragma once

#include <chrono>
#include <memory>

#include "runtime/comm/link.h"
#include "runtime/comm/tcp/receiver.h"
#include "runtime/comm/tcp/sender.h"
#include "runtime/comm/watchdog.h"

namespace muster::runtime::comm::tcp {

class TcpTransport : public Sleeper {
 public:
  // Either may be null.
  TcpTransport(std::unique_ptr<TcpSender> sender, std::unique_ptr<TcpReceiver> receiver);

  bool has_sender() const { return sender_ != nullptr; }
  bool has_receiver() const { return receiver_ != nullptr; }
  // Views onto the sender / receiver; valid while this transport lives.
  std::unique_ptr<SendLink> send_link();
  std::unique_ptr<RecvLink> recv_link();

  // Tells the right neighbour this rank's op failed blaming `blamed`, and
  // closes the outgoing streams (see TcpSender::abort).
  void abort(int blamed) noexcept;

  // Sleeper: nothing to remember; sleep() waits in ppoll until a stream can
  // move (or `max` passes).
  void prepare() override {}
  void sleep(std::chrono::microseconds max) override;

  TcpSender* sender() { return sender_.get(); }
  TcpReceiver* receiver() { return receiver_.get(); }

 private:
  std::unique_ptr<TcpSender> sender_;
  std::unique_ptr<TcpReceiver> receiver_;
};

}  // namespace muster::runtime::comm::tcp
