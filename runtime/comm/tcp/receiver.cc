#include "runtime/comm/tcp/receiver.h"

#include <poll.h>
#include <sys/uio.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>

#include "runtime/error.h"

namespace muster::runtime::comm::tcp {
namespace {
constexpr std::size_t kHeader = sizeof(FrameHeader);
constexpr std::size_t kMaxIov = 64;
constexpr int kWouldBlock = -1;       // read_once: the kernel had nothing
constexpr int kNothingExpected = -2;  // read_once: no slotted segment to read into
// An I/O thread waiting on its socket looks at io_.stopping this often.
constexpr int kPollMs = 20;
}  // namespace

TcpReceiver::TcpReceiver(std::vector<Socket> streams, int peer, std::size_t segment_bytes, std::size_t slots,
                         std::shared_ptr<ProgressBell> bell)
    : streams_(std::move(streams)), peer_(peer), segment_bytes_((segment_bytes + 63) / 64 * 64),
      slots_(slots < 1 ? 1 : slots), bell_(std::move(bell)) {
  MUSTER_CHECK(!streams_.empty(), "TcpReceiver needs at least one stream");
  buffers_ = static_cast<char*>(std::aligned_alloc(64, slots_ * segment_bytes_));
  if (!buffers_) throw Error("TCP transport: out of memory for " + std::to_string(slots_) + " receive slots");
  if (bell_) {
    io_.start(streams_.size(), [this](std::size_t s) { io_loop(s); });
  }
}

TcpReceiver::~TcpReceiver() {
  io_.stop();
  std::free(buffers_);
}

void TcpReceiver::expect(std::size_t bytes) {
  MUSTER_CHECK_LE(bytes, segment_bytes_, "TCP segment larger than a receive slot");
  expect_into(nullptr, bytes);
}

void TcpReceiver::expect_into(void* dst, std::size_t bytes) {
  if (!bell_) {
    expected_.push_back(Expected{next_index_++, bytes, 0, {}, static_cast<char*>(dst)});
    return;
  }
  {
    std::lock_guard<std::mutex> lk(io_.mu);
    expected_.push_back(Expected{next_index_++, bytes, 0, {}, static_cast<char*>(dst)});
  }
  io_.work.notify_all();
}

const void* TcpReceiver::try_recv() {
  if (bell_) {
    std::lock_guard<std::mutex> lk(io_.mu);
    // A failure first: the segment whose header was refused counts as read.
    io_.rethrow_locked();
    if (!expected_.empty() && expected_.front().got == kHeader + expected_.front().bytes) {
      return target(expected_.front());
    }
    return nullptr;
  }
  if (expected_.empty()) return nullptr;
  const Expected& front = expected_.front();
  if (front.got < kHeader + front.bytes) {
    progress();
    if (front.got < kHeader + front.bytes) return nullptr;
  }
  return target(front);
}

void TcpReceiver::release() {
  if (!bell_) {
    expected_.pop_front();
    return;
  }
  {
    std::lock_guard<std::mutex> lk(io_.mu);
    expected_.pop_front();
  }
  io_.work.notify_all();  // a slot came free
}

void TcpReceiver::progress() {
  if (bell_) return;
  for (std::size_t s = 0; s < streams_.size(); ++s) read_stream(s);
}

void TcpReceiver::read_stream(std::size_t s) {
  bool more = true;
  while (more && read_once(s, &more) >= 0) {
  }
}

// With I/O threads, called by stream s's thread: the readv runs without io_.mu.
// Only that thread advances stream s's entries, and the progress thread
// only pops entries that are complete (never one this call reads into).
int TcpReceiver::read_once(std::size_t s, bool* more) {
  *more = false;
  const std::size_t n_streams = streams_.size();
  iovec iov[kMaxIov];
  Expected* targets[kMaxIov / 2];
  std::size_t n = 0, t = 0, asked = 0;
  {
    std::unique_lock<std::mutex> lk(io_.mu, std::defer_lock);
    if (bell_) lk.lock();
    // The stream's announced, slotted, incomplete segments, in order.
    const std::size_t w = window();
    for (std::size_t i = 0; i < w && n + 2 <= kMaxIov; ++i) {
      Expected& e = expected_[i];
      if (e.index % n_streams != s || e.got == kHeader + e.bytes) continue;
      targets[t++] = &e;
      if (e.got < kHeader) {
        iov[n++] = {reinterpret_cast<char*>(&e.header) + e.got, kHeader - e.got};
        if (e.bytes > 0) iov[n++] = {target(e), e.bytes};
      } else {
        iov[n++] = {target(e) + (e.got - kHeader), e.bytes - (e.got - kHeader)};
      }
    }
  }
  if (n == 0) return kNothingExpected;
  for (std::size_t k = 0; k < n; ++k) asked += iov[k].iov_len;
  ssize_t r;
  do {
    r = readv(streams_[s].fd(), iov, static_cast<int>(n));
  } while (r < 0 && errno == EINTR);
  if (r < 0) {
    if (errno == EAGAIN || errno == EWOULDBLOCK) return kWouldBlock;
    const int err = errno;
    throw CommError("TCP link from rank " + std::to_string(peer_) + " (stream " + std::to_string(s) +
                        "): receive failed: " + errno_text(err) + "; rank " + std::to_string(peer_) +
                        " has exited or its host is unreachable",
                    peer_);
  }
  if (r == 0) {
    throw CommError("TCP link from rank " + std::to_string(peer_) + " (stream " + std::to_string(s) +
                        "): the connection was closed while segment " + std::to_string(targets[0]->index) +
                        " was expected; rank " + std::to_string(peer_) + " has exited",
                    peer_);
  }
  std::unique_lock<std::mutex> lk(io_.mu, std::defer_lock);
  if (bell_) lk.lock();
  int completed = 0;
  auto left = static_cast<std::size_t>(r);
  for (std::size_t k = 0; k < t && left > 0; ++k) {
    Expected& e = *targets[k];
    const bool had_header = e.got >= kHeader;
    const std::size_t take = std::min(kHeader + e.bytes - e.got, left);
    e.got += take;
    left -= take;
    if (!had_header && e.got >= kHeader) check_header(e, s);
    completed += e.got == kHeader + e.bytes;
  }
  // A short read means the kernel has nothing more for now.
  *more = static_cast<std::size_t>(r) == asked;
  return completed;
}

void TcpReceiver::io_loop(std::size_t s) {
  const int fd = streams_[s].fd();
  for (;;) {
    bool more = false;
    int got;
    try {
      got = read_once(s, &more);
    } catch (...) {
      io_.fail(std::current_exception());
      bell_->ring();
      return;
    }
    if (got > 0) bell_->ring();
    std::unique_lock<std::mutex> lk(io_.mu);
    if (io_.stopping) return;
    if (got == kNothingExpected) {
      io_.work.wait(lk, [&] { return io_.stopping || has_work_locked(s); });
      if (io_.stopping) return;
    } else if (got == kWouldBlock) {
      lk.unlock();
      pollfd p{fd, POLLIN, 0};
      poll(&p, 1, kPollMs);
    }
  }
}

bool TcpReceiver::has_work_locked(std::size_t s) const {
  const std::size_t w = window();
  for (std::size_t i = 0; i < w; ++i) {
    const Expected& e = expected_[i];
    if (e.index % streams_.size() == s && e.got < kHeader + e.bytes) return true;
  }
  return false;
}

void TcpReceiver::check_header(const Expected& e, std::size_t s) const {
  const FrameHeader& h = e.header;
  const std::string where = "TCP link from rank " + std::to_string(peer_) + " (stream " + std::to_string(s) + ")";
  if (h.magic != kFrameMagic) {
    throw CommError(where + ": segment " + std::to_string(e.index) + " has no valid frame header (magic " +
                        std::to_string(h.magic) + "): the stream is out of step",
                    peer_);
  }
  if (h.kind == static_cast<uint32_t>(FrameKind::kAbort)) {
    const std::string culprit = h.blamed >= 0 ? "rank " + std::to_string(h.blamed) : "an unknown rank";
    throw CommError(where + ": rank " + std::to_string(peer_) + " gave up on this op, blaming " + culprit +
                        " (see rank " + std::to_string(peer_) + "'s error); " + culprit + " has exited or failed",
                    h.blamed >= 0 ? h.blamed : peer_);
  }
  if (h.kind != static_cast<uint32_t>(FrameKind::kData) || h.index != e.index || h.bytes != e.bytes) {
    throw CommError(where + ": expected segment " + std::to_string(e.index) + " of " + std::to_string(e.bytes) +
                        " bytes, got segment " + std::to_string(h.index) + " of " + std::to_string(h.bytes) +
                        " bytes: the ranks disagree on the collective (count, dtype or order)",
                    peer_);
  }
}

void TcpReceiver::add_poll(std::vector<pollfd>* fds) const {
  for (std::size_t s = 0; s < streams_.size(); ++s) {
    if (has_work_locked(s)) fds->push_back(pollfd{streams_[s].fd(), POLLIN, 0});
  }
}

}  // namespace muster::runtime::comm::tcp
