// Point-to-point channels between ranks that reach each other over TCP
// (p2p_channel.h): one stream of their own per pair, connected at formation
// (tcp_formation.h, Hello stream kP2pStream), non-blocking, both directions
// on the one socket. And the waiter of an engine that has such streams:
// ppoll on them plus an eventfd that callers write to wake it.
#pragma once

#include <chrono>
#include <cstddef>
#include <string>
#include <vector>

#include "runtime/comm/p2p_channel.h"
#include "runtime/comm/tcp/socket.h"

namespace muster::runtime::comm::tcp {

class TcpP2pChannel final : public P2pChannel {
 public:
  TcpP2pChannel(Socket socket, int peer);
  int peer() const override { return peer_; }
  std::size_t write(const void* src, std::size_t bytes) override;
  std::size_t read(void* dst, std::size_t bytes) override;
  std::string gone() override { return gone_; }
  int fd() const { return socket_.fd(); }
  // POLLIN, and POLLOUT while a write found the socket full.
  short events() const;

 private:
  Socket socket_;
  int peer_;
  bool blocked_ = false;
  std::string gone_;
  std::vector<char> drop_;  // where dropped bytes go
};

// ppoll over `streams` and an eventfd. Where the engine also has shared
// memory rings (`poll_cap`), whose peers ring a futex ppoll cannot see, each
// sleep is at most `poll_cap`.
class P2pPollWaiter final : public P2pWaiter {
 public:
  P2pPollWaiter(std::vector<TcpP2pChannel*> streams, std::chrono::microseconds poll_cap);
  ~P2pPollWaiter() override;
  void prepare() override {}
  void sleep(std::chrono::microseconds max) override;
  void wake() override;

 private:
  std::vector<TcpP2pChannel*> streams_;
  std::chrono::microseconds poll_cap_;
  int event_fd_;
};

}  // namespace muster::runtime::comm::tcp
