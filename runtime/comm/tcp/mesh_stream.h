// One TCP stream between a pair of ranks that reach each other over TCP
// (different hosts, or every pair under RingTransport::kTcp): the mesh that
// carries the descriptor exchange and alltoall between hosts. Both
// directions share the socket (the sender and the receiver each own a
// duplicate of its descriptor); bytes move inline, when the progress thread
// polls the links (tcp_transport.h says how the inline mode works). Frames,
// zero-copy sends and header checks are the TcpSender's and TcpReceiver's.
//
// Threads: the progress thread only.
#pragma once

#include <poll.h>

#include <cstddef>
#include <memory>
#include <vector>

#include "runtime/comm/link.h"
#include "runtime/comm/tcp/receiver.h"
#include "runtime/comm/tcp/sender.h"
#include "runtime/comm/tcp/socket.h"

namespace muster::runtime::comm::tcp {

class MeshStream {
 public:
  // `segment_bytes`: the largest segment expect() may announce; `slots`
  // segments may be in flight each way.
  MeshStream(Socket socket, int peer, std::size_t segment_bytes, std::size_t slots);
  SendLink& send() { return *send_link_; }
  RecvLink& recv() { return *recv_link_; }
  int peer() const { return peer_; }
  std::size_t segment_bytes() const { return segment_bytes_; }
  // After a failure: an abort frame blaming `blamed`, then the stream shut.
  void abort(int blamed) noexcept { sender_->abort(blamed); }
  // POLLIN/POLLOUT for what waits on this stream.
  void add_poll(std::vector<pollfd>* fds) const {
    sender_->add_poll(fds);
    receiver_->add_poll(fds);
  }

 private:
  int peer_;
  std::size_t segment_bytes_;
  std::unique_ptr<TcpSender> sender_;
  std::unique_ptr<TcpReceiver> receiver_;
  std::unique_ptr<SendLink> send_link_;
  std::unique_ptr<RecvLink> recv_link_;
};

}  // namespace muster::runtime::comm::tcp
