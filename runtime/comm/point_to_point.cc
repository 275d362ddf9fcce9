// PointToPoint (point_to_point.h): the engine's thread, matching, timeouts.
//
// Each pass of the thread:
//   a) takes the ops callers queued (under mu_) and admits them: a send joins
//      its peer's FIFO; a recv claims the oldest unexpected message that
//      matches, else waits in posted_;
//   b) for every peer, writes what its FIFO holds while the stream takes it
//      (its acks first, between messages; then header, then payload from
//      the caller's buffer; a single-copy send only its kPull header, after
//      which it waits in `awaiting` for its kPulled), and reads what has
//      arrived: a header is matched against posted_ (in the order posted)
//      and its payload streamed into that recv's buffer, else into a new
//      unexpected message; a kPull's bytes are read from the sender's
//      memory the same way, then acked;
//   c) when nothing moved: fails ops past their timeout, asks the channels
//      of peers it waits on whether they are gone (every 50 ms), then spins
//      briefly (ops pending) and sleeps on the waiter until a peer or a
//      caller wakes it, or the nearest timeout.
#include "runtime/comm/point_to_point.h"

#include <immintrin.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>
#include <utility>

#include "runtime/comm/point_to_point_internal.h"
#include "runtime/comm/progress_thread.h"
#include "runtime/error.h"

namespace muster::runtime::comm {

using namespace p2p_engine;

PointToPoint::PointToPoint(int rank, int size, std::vector<std::unique_ptr<P2pChannel>> channels,
                           std::unique_ptr<P2pWaiter> waiter, std::chrono::milliseconds timeout,
                           std::chrono::microseconds spin)
    : rank_(rank), size_(size), timeout_(timeout), spin_(spin), waiter_(std::move(waiter)) {
  MUSTER_CHECK_EQ(channels.size(), static_cast<std::size_t>(size), "one channel slot per rank");
  peers_.resize(static_cast<std::size_t>(size));
  for (int r = 0; r < size; ++r) {
    peers_[static_cast<std::size_t>(r)].rank = r;
    peers_[static_cast<std::size_t>(r)].channel = std::move(channels[static_cast<std::size_t>(r)]);
  }
  thread_ = std::thread([this] { run(); });
}

PointToPoint::~PointToPoint() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  waiter_->wake();
  thread_.join();
}

Handle PointToPoint::send(const void* data, std::size_t bytes, int dst, const P2pOptions& options) {
  if (dst < 0 || dst >= size_ || dst == rank_) {
    throw InvalidArgument("send on rank " + std::to_string(rank_) + ": destination rank " + std::to_string(dst) +
                          " is not another rank of this world of " + std::to_string(size_));
  }
  if (bytes > 0 && data == nullptr) throw InvalidArgument("send: null buffer of " + std::to_string(bytes) + " bytes");
  if (!peers_[static_cast<std::size_t>(dst)].channel) {
    throw InvalidArgument("send: rank " + std::to_string(rank_) + " has no point-to-point link to rank " +
                          std::to_string(dst));
  }
  auto op = std::make_shared<Op>();
  op->is_send = true;
  op->data = const_cast<char*>(static_cast<const char*>(data));
  op->bytes = bytes;
  op->peer = dst;
  op->tag = options.tag;
  op->timeout = options.timeout.count() > 0 ? options.timeout : timeout_;
  op->header.tag = options.tag;
  op->header.bytes = bytes;
  if (bytes <= kStagedBytes) {
    // One write for the whole message; the caller's buffer is free at once.
    op->staged.resize(sizeof(P2pHeader) + bytes);
    std::memcpy(op->staged.data(), &op->header, sizeof(P2pHeader));
    if (bytes) std::memcpy(op->staged.data() + sizeof(P2pHeader), data, bytes);
  }
  return submit(std::move(op));
}

Handle PointToPoint::recv(void* data, std::size_t bytes, int src, const P2pOptions& options, int* source) {
  if (src != Communicator::kAnySource && (src < 0 || src >= size_ || src == rank_)) {
    throw InvalidArgument("recv on rank " + std::to_string(rank_) + ": source rank " + std::to_string(src) +
                          " is not another rank of this world of " + std::to_string(size_) +
                          " (or kAnySource)");
  }
  if (bytes > 0 && data == nullptr) throw InvalidArgument("recv: null buffer of " + std::to_string(bytes) + " bytes");
  if (src != Communicator::kAnySource && !peers_[static_cast<std::size_t>(src)].channel) {
    throw InvalidArgument("recv: rank " + std::to_string(rank_) + " has no point-to-point link to rank " +
                          std::to_string(src));
  }
  auto op = std::make_shared<Op>();
  op->data = static_cast<char*>(data);
  op->bytes = bytes;
  op->peer = src;
  op->tag = options.tag;
  op->timeout = options.timeout.count() > 0 ? options.timeout : timeout_;
  op->source = source;
  return submit(std::move(op));
}

Handle PointToPoint::submit(std::shared_ptr<Op> op) {
  Handle handle(op->state);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) throw CommError(describe(*op) + ": the communicator is closed");
    incoming_.push_back(std::move(op));
  }
  waiter_->wake();
  return handle;
}

std::string PointToPoint::describe(const Op& op) const {
  return std::string(op.is_send ? "send to " : "recv from ") + rank_text(op.peer) + " (tag " + std::to_string(op.tag) +
         ", " + std::to_string(op.bytes) + " bytes) on rank " + std::to_string(rank_);
}

void PointToPoint::finish(const std::shared_ptr<Op>& op, std::exception_ptr error) {
  op->state->finish(std::move(error));
}

bool PointToPoint::has_work() const {
  if (!posted_.empty()) return true;
  for (const auto& p : peers_) {
    if (!p.sends.empty() || p.reader || !p.awaiting.empty() || !p.acks.empty() || !p.pushes.empty() ||
        !p.pushed_into.empty()) {
      return true;
    }
  }
  return false;
}

bool PointToPoint::any_source_possible() const {
  for (const auto& p : peers_) {
    if (p.channel && p.gone.empty() && !p.in_broken) return true;
  }
  return false;
}

void PointToPoint::run() {
  std::vector<std::shared_ptr<Op>> batch;
  Clock::time_point last_moved = Clock::now();
  for (;;) {
    waiter_->prepare();
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stopping_) break;
      batch.swap(incoming_);
    }
    Clock::time_point now = Clock::now();
    for (auto& op : batch) admit(op, now);
    batch.clear();
    bool moved = false;
    for (auto& p : peers_) {
      if (!p.channel) continue;
      if (!p.out_broken) moved = pump_pushes(p, now) || moved;
      if (!p.out_broken) moved = pump_out(p, now) || moved;
      if (!p.in_broken) moved = pump_in(p, now) || moved;
    }
    if (moved) {
      last_moved = now;
      continue;
    }
    for (auto& p : peers_) {
      if (p.channel && !p.settled) p.settled = p.channel->settle();
    }
    now = Clock::now();
    check_timeouts(now);
    if (now >= next_peer_check_) {
      check_peers(now);
      next_peer_check_ = now + kPeerCheckPeriod;
    }
    const bool work = has_work();
    if (work && now - last_moved < spin_) {
      _mm_pause();
      continue;
    }
    // Sleep until woken, or the nearest timeout, and at most one peer check apart while waiting on peers.
    auto wait = work ? std::chrono::duration_cast<std::chrono::microseconds>(kPeerCheckPeriod)
                     : std::chrono::microseconds(200000);
    auto nearer = [&](Clock::time_point at) {
      const auto left = std::chrono::duration_cast<std::chrono::microseconds>(at - now);
      wait = std::max(std::chrono::microseconds(100), std::min(wait, left));
    };
    for (const auto& op : posted_) nearer(op->since + op->timeout);
    for (const auto& p : peers_) {
      if (!p.sends.empty()) nearer(std::max(p.sends.front()->since, p.last_out) + p.sends.front()->timeout);
      if (p.reader) nearer(p.reader->since + p.reader->timeout);
      for (const auto& [seq, op] : p.awaiting) nearer(op->since + op->timeout);
    }
    waiter_->sleep(wait);
  }
  wait_for_copies(std::chrono::milliseconds(2000));
  fail_all("the communicator was closed while it waited");
}

// At close: a recv a peer is still writing into, or a send it is still
// reading from, is not handed back (failed) before the peer has finished or
// gone, so no buffer is touched after its op ended.
void PointToPoint::wait_for_copies(std::chrono::milliseconds at_most) {
  const auto until = Clock::now() + at_most;
  for (;;) {
    bool any = false;
    for (auto& p : peers_) {
      if ((p.pushed_into.empty() && p.awaiting.empty()) || !p.channel || p.in_broken || !p.gone.empty()) continue;
      any = true;
      pump_in(p, Clock::now());
      if (!p.channel->gone().empty()) peer_gone(p, p.channel->gone());
    }
    if (!any || Clock::now() >= until) return;
    waiter_->prepare();
    waiter_->sleep(std::chrono::microseconds(1000));
  }
}

void PointToPoint::admit(const std::shared_ptr<Op>& op, Clock::time_point now) {
  op->since = now;
  if (op->is_send) {
    Peer& p = peers_[static_cast<std::size_t>(op->peer)];
    if (!p.gone.empty() || p.out_broken) {
      finish(op, std::make_exception_ptr(CommError(describe(*op) + ": rank " + std::to_string(p.rank) + " " +
                                                       (p.gone.empty() ? kCutOff : p.gone),
                                                   p.rank)));
      return;
    }
    if (op->bytes >= kPullMinBytes && p.channel->peer_pulls()) {
      op->header.kind = P2pHeader::kPull;
      op->header.from = reinterpret_cast<uint64_t>(op->data);
      op->header.seq = op->pull_seq = ++p.next_pull_seq;
      op->staged.resize(sizeof(P2pHeader));
      std::memcpy(op->staged.data(), &op->header, sizeof(P2pHeader));
    }
    p.sends.push_back(op);
    return;
  }
  for (auto u = unexpected_.begin(); u != unexpected_.end(); ++u) {
    if ((op->peer == Communicator::kAnySource || op->peer == u->src) && op->tag == u->tag) {
      claim(op, u);
      return;
    }
  }
  if (op->peer != Communicator::kAnySource) {
    const Peer& p = peers_[static_cast<std::size_t>(op->peer)];
    if (!p.gone.empty() || p.in_broken) {
      finish(op, std::make_exception_ptr(CommError(describe(*op) + ": rank " + std::to_string(p.rank) + " " +
                                                       (p.gone.empty() ? kGarbled : p.gone) +
                                                       ", and nothing it sent with this tag is left to receive",
                                                   p.rank)));
      return;
    }
  } else if (!any_source_possible()) {
    finish(op, std::make_exception_ptr(CommError(describe(*op) + ": every other rank is gone")));
    return;
  }
  posted_.push_back(op);
}

void PointToPoint::claim(const std::shared_ptr<Op>& op, std::list<Unexpected>::iterator u) {
  Peer& p = peers_[static_cast<std::size_t>(u->src)];
  const bool filling = !u->complete && p.to_unexpected && p.holder == u;
  if (u->bytes != op->bytes) {
    if (filling) {  // the rest of it is dropped as it arrives
      p.to_unexpected = false;
      p.target = nullptr;
    }
    const int src = u->src;
    const std::size_t sent = u->bytes;
    unexpected_.erase(u);
    finish(op, std::make_exception_ptr(MismatchError(describe(*op) + ": rank " + std::to_string(src) + " sent " +
                                                     std::to_string(sent) + " bytes, this recv holds " +
                                                     std::to_string(op->bytes))));
    return;
  }
  if (op->source) *op->source = u->src;
  if (u->got) std::memcpy(op->data, u->data.get(), u->got);
  if (u->complete) {
    unexpected_.erase(u);
    finish(op, nullptr);
    return;
  }
  // Still arriving: the rest goes straight into the recv's buffer.
  op->done = u->got;
  p.reader = op;
  p.target = op->data + u->got;
  p.to_unexpected = false;
  unexpected_.erase(u);
}

}  // namespace muster::runtime::comm
