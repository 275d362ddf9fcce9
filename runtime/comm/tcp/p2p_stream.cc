#include "runtime/comm/tcp/p2p_stream.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>

#include "runtime/error.h"

namespace muster::runtime::comm::tcp {

TcpP2pChannel::TcpP2pChannel(Socket socket, int peer) : socket_(std::move(socket)), peer_(peer) {}

short TcpP2pChannel::events() const { return static_cast<short>(POLLIN | (blocked_ ? POLLOUT : 0)); }

std::size_t TcpP2pChannel::write(const void* src, std::size_t bytes) {
  if (!gone_.empty() || bytes == 0) return 0;
  const ssize_t n = ::send(socket_.fd(), src, bytes, MSG_NOSIGNAL | MSG_DONTWAIT);
  if (n > 0) {
    blocked_ = static_cast<std::size_t>(n) < bytes;
    return static_cast<std::size_t>(n);
  }
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
    blocked_ = true;
    return 0;
  }
  gone_ = "broke its point-to-point stream (" + errno_text(errno) + ")";
  return 0;
}

std::size_t TcpP2pChannel::read(void* dst, std::size_t bytes) {
  if (!gone_.empty() || bytes == 0) return 0;
  if (!dst) {
    drop_.resize(std::min<std::size_t>(bytes, 1 << 16));
    dst = drop_.data();
    bytes = drop_.size();
  }
  const ssize_t n = ::recv(socket_.fd(), dst, bytes, MSG_DONTWAIT);
  if (n > 0) return static_cast<std::size_t>(n);
  if (n == 0) {
    gone_ = "closed its point-to-point stream (its communicator closed, or its process exited)";
  } else if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
    gone_ = "broke its point-to-point stream (" + errno_text(errno) + ")";
  }
  return 0;
}

P2pPollWaiter::P2pPollWaiter(std::vector<TcpP2pChannel*> streams, std::chrono::microseconds poll_cap)
    : streams_(std::move(streams)), poll_cap_(poll_cap), event_fd_(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {
  if (event_fd_ < 0) throw Error("point-to-point: eventfd failed: " + errno_text(errno));
}

P2pPollWaiter::~P2pPollWaiter() { ::close(event_fd_); }

void P2pPollWaiter::sleep(std::chrono::microseconds max) {
  if (poll_cap_.count() > 0) max = std::min(max, poll_cap_);
  std::vector<pollfd> fds;
  fds.push_back(pollfd{event_fd_, POLLIN, 0});
  for (auto* s : streams_) {
    if (s->gone().empty()) fds.push_back(pollfd{s->fd(), s->events(), 0});
  }
  const timespec ts{static_cast<time_t>(max.count() / 1000000), static_cast<long>(max.count() % 1000000) * 1000};
  ::ppoll(fds.data(), fds.size(), &ts, nullptr);
  if (fds[0].revents & POLLIN) {
    uint64_t v;
    while (::read(event_fd_, &v, sizeof v) > 0) {
    }
  }
}

void P2pPollWaiter::wake() {
  const uint64_t one = 1;
  while (::write(event_fd_, &one, sizeof one) < 0 && errno == EINTR) {
  }
}

}  // namespace muster::runtime::comm::tcp
