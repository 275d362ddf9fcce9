#include "runtime/comm/tcp/sender.h"

#include <sys/socket.h>
#include <sys/uio.h>

#include <algorithm>
#include <cerrno>

#include "runtime/error.h"

namespace muster::runtime::comm::tcp {
namespace {
constexpr std::size_t kHeader = sizeof(FrameHeader);
constexpr std::size_t kMaxIov = 64;
}  // namespace

TcpSender::TcpSender(std::vector<Socket> streams, int peer, std::size_t in_flight)
    : peer_(peer), in_flight_(std::max<std::size_t>(in_flight, 1)) {
  for (auto& s : streams) streams_.push_back(Stream{std::move(s), {}});
  MUSTER_CHECK(!streams_.empty(), "TcpSender needs at least one stream");
}

bool TcpSender::try_send(const void* src, std::size_t bytes) {
  if (queued_ >= in_flight_) {
    progress();
    if (queued_ >= in_flight_) return false;
  }
  Frame f{};
  f.header.index = next_index_;
  f.header.bytes = bytes;
  f.data = static_cast<const char*>(src);
  const std::size_t s = next_index_ % streams_.size();
  ++next_index_;
  streams_[s].queue.push_back(f);
  ++queued_;
  write_stream(s);
  return true;
}

bool TcpSender::flushed() {
  if (queued_ == 0) return true;
  progress();
  return queued_ == 0;
}

void TcpSender::progress() {
  for (std::size_t s = 0; s < streams_.size(); ++s) {
    if (!streams_[s].queue.empty()) write_stream(s);
  }
}

void TcpSender::write_stream(std::size_t s) {
  Stream& st = streams_[s];
  while (!st.queue.empty()) {
    iovec iov[kMaxIov];
    std::size_t n = 0;
    for (std::size_t i = 0; i < st.queue.size() && n + 2 <= kMaxIov; ++i) {
      Frame& f = st.queue[i];
      if (f.sent < kHeader) {
        iov[n++] = {reinterpret_cast<char*>(&f.header) + f.sent, kHeader - f.sent};
        if (f.header.bytes > 0) iov[n++] = {const_cast<char*>(f.data), f.header.bytes};
      } else {
        iov[n++] = {const_cast<char*>(f.data) + (f.sent - kHeader), f.header.bytes - (f.sent - kHeader)};
      }
    }
    msghdr msg{};
    msg.msg_iov = iov;
    msg.msg_iovlen = n;
    const ssize_t w = sendmsg(st.socket.fd(), &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK) return;
      if (errno == EINTR) continue;
      const int err = errno;
      throw CommError("TCP link to rank " + std::to_string(peer_) + " (stream " + std::to_string(s) +
                          "): send failed: " + errno_text(err) + "; rank " + std::to_string(peer_) +
                          " has exited or its host is unreachable",
                      peer_);
    }
    auto left = static_cast<std::size_t>(w);
    while (left > 0) {
      Frame& f = st.queue.front();
      const std::size_t rest = kHeader + f.header.bytes - f.sent;
      const std::size_t take = std::min(rest, left);
      f.sent += take;
      left -= take;
      if (take == rest) {
        st.queue.pop_front();
        --queued_;
      }
    }
  }
}

void TcpSender::abort(int blamed) noexcept {
  for (auto& st : streams_) {
    const bool between_frames = st.queue.empty() || st.queue.front().sent == 0;
    st.queue.clear();
    if (!st.socket.valid()) continue;
    if (between_frames) {
      FrameHeader h;
      h.kind = static_cast<uint32_t>(FrameKind::kAbort);
      h.blamed = blamed;
      (void)!send(st.socket.fd(), &h, sizeof h, MSG_NOSIGNAL | MSG_DONTWAIT);
    }
    shutdown(st.socket.fd(), SHUT_WR);
  }
  queued_ = 0;
}

void TcpSender::add_poll(std::vector<pollfd>* fds) const {
  for (const auto& st : streams_) {
    if (!st.queue.empty()) fds->push_back(pollfd{st.socket.fd(), POLLOUT, 0});
  }
}

}  // namespace muster::runtime::comm::tcp
