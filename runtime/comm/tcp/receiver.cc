#include "runtime/comm/tcp/receiver.h"

#include <sys/uio.h>

#include <cerrno>
#include <cstdlib>

#include "runtime/error.h"

namespace muster::runtime::comm::tcp {
namespace {
constexpr std::size_t kHeader = sizeof(FrameHeader);
constexpr std::size_t kMaxIov = 64;
}  // namespace

TcpReceiver::TcpReceiver(std::vector<Socket> streams, int peer, std::size_t segment_bytes, std::size_t slots)
    : streams_(std::move(streams)), peer_(peer), segment_bytes_((segment_bytes + 63) / 64 * 64),
      slots_(slots < 1 ? 1 : slots) {
  MUSTER_CHECK(!streams_.empty(), "TcpReceiver needs at least one stream");
  buffers_ = static_cast<char*>(std::aligned_alloc(64, slots_ * segment_bytes_));
  if (!buffers_) throw Error("TCP transport: out of memory for " + std::to_string(slots_) + " receive slots");
}

TcpReceiver::~TcpReceiver() { std::free(buffers_); }

void TcpReceiver::expect(std::size_t bytes) {
  MUSTER_CHECK_LE(bytes, segment_bytes_, "TCP segment larger than a receive slot");
  expected_.push_back(Expected{next_index_++, bytes, 0, {}, nullptr});
}

void TcpReceiver::expect_into(void* dst, std::size_t bytes) {
  expected_.push_back(Expected{next_index_++, bytes, 0, {}, static_cast<char*>(dst)});
}

const void* TcpReceiver::try_recv() {
  if (expected_.empty()) return nullptr;
  const Expected& front = expected_.front();
  if (front.got < kHeader + front.bytes) {
    progress();
    if (front.got < kHeader + front.bytes) return nullptr;
  }
  return target(front);
}

void TcpReceiver::release() { expected_.pop_front(); }

void TcpReceiver::progress() {
  for (std::size_t s = 0; s < streams_.size(); ++s) read_stream(s);
}

void TcpReceiver::read_stream(std::size_t s) {
  const std::size_t n_streams = streams_.size();
  const std::size_t w = window();
  for (;;) {
    // The stream's announced, slotted, incomplete segments, in order.
    iovec iov[kMaxIov];
    Expected* targets[kMaxIov / 2];
    std::size_t n = 0, t = 0;
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
    if (n == 0) return;
    const ssize_t r = readv(streams_[s].fd(), iov, static_cast<int>(n));
    if (r < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK) return;
      if (errno == EINTR) continue;
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
    auto left = static_cast<std::size_t>(r);
    for (std::size_t k = 0; k < t && left > 0; ++k) {
      Expected& e = *targets[k];
      const bool had_header = e.got >= kHeader;
      const std::size_t take = std::min(kHeader + e.bytes - e.got, left);
      e.got += take;
      left -= take;
      if (!had_header && e.got >= kHeader) check_header(e, s);
    }
    // A short read means the kernel has nothing more for now.
    std::size_t asked = 0;
    for (std::size_t k = 0; k < n; ++k) asked += iov[k].iov_len;
    if (static_cast<std::size_t>(r) < asked) return;
  }
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
  const std::size_t w = window();
  for (std::size_t s = 0; s < streams_.size(); ++s) {
    for (std::size_t i = 0; i < w; ++i) {
      const Expected& e = expected_[i];
      if (e.index % streams_.size() == s && e.got < kHeader + e.bytes) {
        fds->push_back(pollfd{streams_[s].fd(), POLLIN, 0});
        break;
      }
    }
  }
}

}  // namespace muster::runtime::comm::tcp
