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
// An I/O thread blocked on a full socket looks at io_.stopping this often.
constexpr int kPollMs = 20;
}  // namespace

TcpSender::TcpSender(std::vector<Socket> streams, int peer, std::size_t in_flight, std::shared_ptr<ProgressBell> bell)
    : peer_(peer), in_flight_(std::max<std::size_t>(in_flight, 1)), bell_(std::move(bell)) {
  for (auto& s : streams) streams_.push_back(Stream{std::move(s), {}});
  MUSTER_CHECK(!streams_.empty(), "TcpSender needs at least one stream");
  if (bell_) {
    io_.start(streams_.size(), [this](std::size_t s) { io_loop(s); });
  }
}

TcpSender::~TcpSender() { io_.stop(); }

bool TcpSender::try_send(const void* src, std::size_t bytes) {
  Frame f{};
  f.header.bytes = bytes;
  f.data = static_cast<const char*>(src);
  if (bell_) {
    {
      std::lock_guard<std::mutex> lk(io_.mu);
      io_.rethrow_locked();
      if (queued_ >= in_flight_) return false;
      f.header.index = next_index_++;
      streams_[f.header.index % streams_.size()].queue.push_back(f);
      ++queued_;
    }
    io_.work.notify_all();
    return true;
  }
  if (queued_ >= in_flight_) {
    progress();
    if (queued_ >= in_flight_) return false;
  }
  f.header.index = next_index_++;
  const std::size_t s = f.header.index % streams_.size();
  streams_[s].queue.push_back(f);
  ++queued_;
  write_stream(s);
  return true;
}

uint32_t TcpSender::round_trip_us() const {
  uint32_t best = 0;
  for (const Stream& stream : streams_) {
    const uint32_t rtt = tcp::round_trip_us(stream.socket);
    if (rtt > 0 && (best == 0 || rtt < best)) best = rtt;
  }
  return best;
}

bool TcpSender::flushed() {
  if (bell_) {
    std::lock_guard<std::mutex> lk(io_.mu);
    io_.rethrow_locked();
    return queued_ == 0;
  }
  if (queued_ == 0) return true;
  progress();
  return queued_ == 0;
}

void TcpSender::progress() {
  if (bell_) {
    // The threads write; a failed stream is reported here too, so a rank
    // waiting on its left still learns at once that its right one is gone.
    std::lock_guard<std::mutex> lk(io_.mu);
    io_.rethrow_locked();
    return;
  }
  for (std::size_t s = 0; s < streams_.size(); ++s) {
    if (!streams_[s].queue.empty()) write_stream(s);
  }
}

void TcpSender::write_stream(std::size_t s) {
  while (!streams_[s].queue.empty() && write_once(s) >= 0) {
  }
}

// With I/O threads, called by stream s's thread without io_.mu: only that thread
// pops stream s's queue or touches its frames' `sent`, and a deque keeps the
// address of an element while others are pushed.
int TcpSender::write_once(std::size_t s) {
  Stream& st = streams_[s];
  iovec iov[kMaxIov];
  std::size_t n = 0;
  {
    std::unique_lock<std::mutex> lk(io_.mu, std::defer_lock);
    if (bell_) lk.lock();  // the progress thread may be pushing
    for (std::size_t i = 0; i < st.queue.size() && n + 2 <= kMaxIov; ++i) {
      Frame& f = st.queue[i];
      if (f.sent < kHeader) {
        iov[n++] = {reinterpret_cast<char*>(&f.header) + f.sent, kHeader - f.sent};
        if (f.header.bytes > 0) iov[n++] = {const_cast<char*>(f.data), f.header.bytes};
      } else {
        iov[n++] = {const_cast<char*>(f.data) + (f.sent - kHeader), f.header.bytes - (f.sent - kHeader)};
      }
    }
  }
  if (n == 0) return 0;
  msghdr msg{};
  msg.msg_iov = iov;
  msg.msg_iovlen = n;
  ssize_t w;
  do {
    w = sendmsg(st.socket.fd(), &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
  } while (w < 0 && errno == EINTR);
  if (w < 0) {
    if (errno == EAGAIN || errno == EWOULDBLOCK) return -1;
    const int err = errno;
    throw CommError("TCP link to rank " + std::to_string(peer_) + " (stream " + std::to_string(s) +
                        "): send failed: " + errno_text(err) + "; rank " + std::to_string(peer_) +
                        " has exited or its host is unreachable",
                    peer_);
  }
  std::unique_lock<std::mutex> lk(io_.mu, std::defer_lock);
  if (bell_) lk.lock();
  int finished = 0;
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
      ++finished;
    }
  }
  return finished;
}

void TcpSender::io_loop(std::size_t s) {
  const int fd = streams_[s].socket.fd();
  for (;;) {
    {
      std::unique_lock<std::mutex> lk(io_.mu);
      io_.work.wait(lk, [&] { return io_.stopping || !streams_[s].queue.empty(); });
      if (io_.stopping) return;
    }
    try {
      const int finished = write_once(s);
      if (finished > 0) bell_->ring();
      if (finished < 0) {
        pollfd p{fd, POLLOUT, 0};
        poll(&p, 1, kPollMs);
      }
    } catch (...) {
      io_.fail(std::current_exception());
      bell_->ring();
      return;
    }
  }
}

void TcpSender::abort(int blamed) noexcept {
  io_.stop();
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
