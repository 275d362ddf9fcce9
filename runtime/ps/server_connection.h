// One worker's connection to a PS task (internal to the server: only the
// server_*.cc files include it).
//
// Contract
// - Every handler runs on the connection's strand and the connection has at
//   most one operation in flight: read a frame, handle it, maybe wait (a
//   pull parks it in the server), write the answer, read the next frame.
// - send_params(), send_error(), close(), expire_if_late() and evict() may
//   be called from any thread: they post onto the strand.
// - Limits (server.h, "Hostile clients"): nothing is allocated for a frame
//   before its header has passed every check (on_header, server_frames.cc);
//   payloads are read in pieces of kPayloadPieceBytes, an init's buffer
//   grows only as its pieces arrive; a deadline (deadline_, checked by
//   PsServer::Impl::sweep) bounds the hello and every started frame or
//   reply. Any violation closes this connection only.
// - The connection holds one of the server's max_connections slots from
//   accept until it closes (release_slot), and reports its loss to the
//   server exactly once (lost).
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "runtime/ps/server_impl.h"

namespace muster::runtime::ps {

class Connection : public std::enable_shared_from_this<Connection> {
 public:
  Connection(PsServer::Impl& s, tcp::socket sock);
  ~Connection();

  // Arms the hello deadline and reads the first header.
  void start();
  // Answers a pull (kParams) or a state pull (kState).
  void send_params(uint32_t slice, int64_t step, std::shared_ptr<std::vector<float>> values, Op op = Op::kParams,
                   uint32_t aux = 0);
  // Sends kError, half-closes and drains until the client closes.
  void send_error(const std::string& message, bool timeout = false);
  void close();
  // Closes the connection if its deadline has passed (sweep).
  void expire_if_late(Clock::time_point now);
  // Evicted to make room under max_connections; true the first time.
  bool evict();

  bool authenticated() const { return worker_.load() >= 0; }
  bool evicted() const { return evicted_.load(); }
  Clock::time_point accepted() const { return accepted_; }

  std::atomic<int> worker_{-1};  // set by the hello (PsServer::Impl::hello); -1 before

 private:
  void set_deadline(int ms);
  // Extends the deadline of a started frame after progress; the hello's stays.
  void progress();
  void drain();
  void shut();
  // Reads a header with read_some, so that a partial one arms the deadline.
  void read_header();
  void read_header_rest();
  void bad_frame(const std::string& reason);
  void closed(const boost::system::error_code& ec, const char* during);
  void lost();
  void release_slot();
  void release_init_buffer();
  // Reads `n` payload bytes into `dst` in pieces, each extending the deadline, then runs `then`.
  template <typename Then>
  void read_payload(unsigned char* dst, uint64_t n, uint64_t off, Then then);
  // An init payload: the buffer grows by one piece only once the previous
  // piece has arrived, so a declared length costs nothing until it is sent.
  void read_init(uint64_t off);
  void on_header();  // server_frames.cc: checks a header, then reads and handles its frame
  void on_hello();   // server_frames.cc
  void shut_after_error(const std::string& message);
  void reject(const std::string& why);

  PsServer::Impl& s_;
  tcp::socket sock_;
  std::string peer_;
  const Clock::time_point accepted_ = Clock::now();
  std::atomic<int64_t> deadline_{0};  // Clock ticks; 0: none (idle between frames, or waiting for a step)
  std::atomic<bool> evicted_{false};
  bool done_ = false;
  bool inits_over_ = false;  // chief: a frame other than kInit came (on the strand)
  bool reported_lost_ = false;
  uint32_t stale_ = 0;  // this connection's pushes dropped as stale (sent in kParams' aux)
  bool slot_released_ = false;
  HeaderBytes in_{};
  std::size_t header_got_ = 0;
  FrameHeader h_;
  std::vector<float> buf_;
  std::vector<unsigned char> small_;
  std::shared_ptr<std::vector<float>> init_;
  uint64_t init_accounted_ = 0;  // bytes of init_ counted in init_buffered_
  HeaderBytes out_{};
  std::shared_ptr<std::vector<float>> sending_;
  std::string err_;
};

template <typename Then>
void Connection::read_payload(unsigned char* dst, uint64_t n, uint64_t off, Then then) {
  const uint64_t k = std::min<uint64_t>(kPayloadPieceBytes, n - off);
  progress();
  asio::async_read(sock_, asio::buffer(dst + off, k),
                   [self = shared_from_this(), dst, n, off, k, then](boost::system::error_code ec, std::size_t got) {
                     self->s_.bytes_in_ += got;
                     if (ec == asio::error::eof) {
                       return self->bad_frame("truncated " + std::string(op_name(self->h_.op)) + " frame: " +
                                              std::to_string(off + got) + " of " + std::to_string(self->h_.length) +
                                              " payload bytes");
                     }
                     if (ec) return self->closed(ec, "reading a payload");
                     if (off + k == n) return then();
                     self->read_payload(dst, n, off + k, then);
                   });
}

}  // namespace muster::runtime::ps
