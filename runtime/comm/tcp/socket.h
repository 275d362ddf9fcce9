// A TCP socket as a move-only RAII file descriptor, and the few socket calls
// the TCP transport makes, each turning errno into a message that says which
// call failed and why.
//
// Threads: a Socket belongs to one thread at a time (the bootstrap, then the
// progress thread).
#pragma once

#include <netinet/in.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>

namespace muster::runtime::comm::tcp {

class Socket {
 public:
  Socket() = default;
  explicit Socket(int fd) : fd_(fd) {}
  Socket(Socket&& other) noexcept : fd_(other.release()) {}
  Socket& operator=(Socket&& other) noexcept;
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;
  ~Socket() { reset(); }

  int fd() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int release() {
    const int fd = fd_;
    fd_ = -1;
    return fd;
  }
  void reset();

 private:
  int fd_ = -1;
};

// "10.1.2.3:4567"
std::string format_endpoint(in_addr addr, uint16_t port);
// "Connection reset by peer" for the current errno (or `err`).
std::string errno_text(int err);

// SO_SNDBUF and SO_RCVBUF of `buffer_bytes` (0: leave the kernel's
// autotuning). Before connect()/listen(), so the window scale fits them.
void set_buffers(const Socket& s, std::size_t buffer_bytes);

// What a connected ring stream needs: non-blocking, TCP_NODELAY, and
// TCP_USER_TIMEOUT so data a dead host never acknowledges fails the socket
// after `timeout`. Throws Error naming the option that could not be set.
void configure_stream(const Socket& s, std::chrono::milliseconds timeout);

// The kernel's smoothed round trip of a connected stream (TCP_INFO), in
// microseconds; 0 when it cannot say. Right after connect() it is the
// handshake's, timed by the kernels at both ends, not by either process.
uint32_t round_trip_us(const Socket& s);

}  // namespace muster::runtime::comm::tcp
