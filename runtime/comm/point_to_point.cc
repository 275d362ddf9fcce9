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

#include "runtime/comm/progress_thread.h"
#include "runtime/error.h"

namespace muster::runtime::comm {
namespace {

constexpr auto kPeerCheckPeriod = std::chrono::milliseconds(50);
constexpr std::size_t kStagedBytes = 4096;          // header and payload in one write below this
constexpr std::size_t kBytesPerPump = 8u << 20;     // then the other peers get their turn
constexpr std::size_t kPullPiece = 4u << 20;        // bytes one process_vm_readv reads
constexpr uint32_t kMagic = P2pHeader{}.magic;
const char* const kCutOff = "is cut off: an earlier send to it timed out part-way";
const char* const kGarbled = "sent bytes that are no point-to-point message (a different muster version?)";

std::string rank_text(int r) { return r == Communicator::kAnySource ? "any rank" : "rank " + std::to_string(r); }

}  // namespace

struct PointToPoint::Op {
  bool is_send = false;
  char* data = nullptr;
  std::size_t bytes = 0;
  int peer = 0;  // recv: kAnySource allowed
  int64_t tag = 0;
  std::chrono::milliseconds timeout{0};
  int* source = nullptr;
  std::shared_ptr<detail::OpState> state = std::make_shared<detail::OpState>();
  // Send: what goes on the stream (header, and small payloads with it), and how far it got.
  std::vector<char> staged;
  std::size_t staged_done = 0;
  uint64_t pull_seq = 0;   // a single-copy send: its kPull's seq (the bytes stay in `data`)
  bool pulled = false;     // its kPulled came
  bool pinned = false;     // a recv the sender is writing into: no timeout withdraws it
  P2pHeader header;
  std::size_t header_done = 0;
  std::size_t done = 0;    // payload bytes moved
  Clock::time_point since; // admitted, matched, or last moved
};

struct PointToPoint::Unexpected {
  int src = 0;
  int64_t tag = 0;
  std::unique_ptr<char[]> data;  // not zeroed: every byte is written before it is read
  std::size_t bytes = 0;
  std::size_t got = 0;
  bool complete = false;
};

struct PointToPoint::Peer {
  int rank = 0;
  std::unique_ptr<P2pChannel> channel;
  std::deque<std::shared_ptr<Op>> sends;
  std::deque<P2pHeader> acks;       // kPulled, kShare, kPushed to write, between messages
  std::size_t ack_done = 0;         // of acks.front()
  std::map<uint64_t, std::shared_ptr<Op>> awaiting;  // single-copy sends out, by seq, until kPulled
  struct Push {
    std::shared_ptr<Op> op;  // the send whose second half goes
    uint64_t to = 0;         // the recv buffer's address in the peer
    std::size_t at = 0, end = 0;
  };
  std::deque<Push> pushes;                           // halves this rank writes into the peer (kShare)
  std::map<uint64_t, std::shared_ptr<Op>> pushed_into;  // recvs the peer writes into, by seq, until kPushed
  uint64_t next_pull_seq = 0;
  bool settled = false;             // channel->settle() returned true
  Clock::time_point last_out{};
  // The message being read.
  bool in_payload = false;
  P2pHeader header;
  std::size_t header_got = 0;
  std::size_t remaining = 0;
  uint64_t pull_from = 0;                  // a kPull: where its bytes are in the sender (0: in the stream)
  uint64_t pull_seq = 0;
  std::size_t pulled = 0;                  // bytes of it read so far
  char* target = nullptr;                  // null: dropped
  std::shared_ptr<Op> reader;              // the recv it fills
  std::list<Unexpected>::iterator holder;  // or the unexpected message it fills
  bool to_unexpected = false;
  std::string gone;          // why the peer is gone ("" while it is not)
  bool out_broken = false;   // a send timed out part-way: its framing is lost, nothing more can go
  bool in_broken = false;    // it sent bytes that are no message: nothing more can be read
};

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

void PointToPoint::control(Peer& p, P2pHeader::Kind kind, uint64_t seq, uint64_t from, uint64_t bytes) {
  P2pHeader h;
  h.kind = kind;
  h.seq = seq;
  h.from = from;
  h.bytes = bytes;
  p.acks.push_back(h);
}

bool PointToPoint::pump_pushes(Peer& p, Clock::time_point now) {
  std::size_t moved = 0;
  while (!p.pushes.empty() && moved < kBytesPerPump) {
    Peer::Push& push = p.pushes.front();
    std::string error;
    const std::size_t n = p.channel->push(push.to + push.at, push.op->data + push.at,
                                          std::min(push.end - push.at, kPullPiece), &error);
    if (n == 0) {
      p.out_broken = true;
      fail_sends(p, "cannot have its memory written (" + error + ")");
      return moved > 0;
    }
    moved += n;
    push.at += n;
    push.op->since = now;
    if (push.at == push.end) {
      const std::shared_ptr<Op> op = push.op;
      p.pushes.pop_front();
      control(p, P2pHeader::kPushed, op->pull_seq);
      if (op->pulled) {
        p.awaiting.erase(op->pull_seq);
        finish(op, nullptr);
      }
    }
  }
  return moved > 0;
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

bool PointToPoint::pump_out(Peer& p, Clock::time_point now) {
  std::size_t moved = 0;
  auto between_messages = [&] {
    if (p.sends.empty()) return true;
    const Op& front = *p.sends.front();
    return front.staged_done == 0 && front.header_done == 0;
  };
  while (!p.acks.empty() && (p.ack_done > 0 || between_messages())) {
    const std::size_t n = p.channel->write(reinterpret_cast<const char*>(&p.acks.front()) + p.ack_done,
                                           sizeof(P2pHeader) - p.ack_done);
    if (n == 0) return moved > 0;
    moved += n;
    p.ack_done += n;
    if (p.ack_done == sizeof(P2pHeader)) {
      p.acks.pop_front();
      p.ack_done = 0;
    }
  }
  while (!p.sends.empty() && moved < kBytesPerPump) {
    const std::shared_ptr<Op>& op = p.sends.front();
    std::size_t n;
    if (!op->staged.empty()) {
      n = p.channel->write(op->staged.data() + op->staged_done, op->staged.size() - op->staged_done);
      op->staged_done += n;
    } else if (op->header_done < sizeof(P2pHeader)) {
      n = p.channel->write(reinterpret_cast<const char*>(&op->header) + op->header_done,
                           sizeof(P2pHeader) - op->header_done);
      op->header_done += n;
    } else {
      n = p.channel->write(op->data + op->done, op->bytes - op->done);
      op->done += n;
    }
    if (n == 0) break;
    moved += n;
    op->since = now;
    const bool complete = op->staged.empty()
                              ? op->header_done == sizeof(P2pHeader) && op->done == op->bytes
                              : op->staged_done == op->staged.size();
    if (complete) {
      if (op->pull_seq) {
        p.awaiting[op->pull_seq] = op;  // done once the peer has read it
      } else {
        finish(op, nullptr);
      }
      p.sends.pop_front();
      if (!p.acks.empty()) break;  // between messages: the acks go first
    }
  }
  if (moved) p.last_out = now;
  return moved > 0;
}

bool PointToPoint::pump_in(Peer& p, Clock::time_point now) {
  std::size_t moved = 0;
  while (moved < kBytesPerPump && !p.in_broken) {
    if (!p.in_payload) {
      const std::size_t n =
          p.channel->read(reinterpret_cast<char*>(&p.header) + p.header_got, sizeof(P2pHeader) - p.header_got);
      if (n == 0) break;
      moved += n;
      p.header_got += n;
      if (p.header_got == sizeof(P2pHeader)) {
        p.header_got = 0;
        on_header(p, now);
      }
      continue;
    }
    std::size_t n;
    if (p.pull_from) {
      n = std::min(p.remaining, kPullPiece);
      if (p.target) {
        std::string error;
        n = p.channel->pull(p.target, p.pull_from + p.pulled, n, &error);
        if (n == 0) {
          p.in_broken = true;
          peer_gone(p, "cannot have its memory read (" + error + ")");
          break;
        }
      }
      p.pulled += n;
    } else {
      n = p.channel->read(p.target, p.remaining);
    }
    if (n == 0) break;
    moved += n;
    p.remaining -= n;
    if (p.target) p.target += n;
    if (p.to_unexpected) p.holder->got += n;
    if (p.reader) {
      p.reader->done += n;
      p.reader->since = now;
    }
    if (p.remaining == 0) complete_message(p);
  }
  return moved > 0;
}

void PointToPoint::on_header(Peer& p, Clock::time_point now) {
  if (p.header.magic != kMagic ||
      p.header.kind < P2pHeader::kData || p.header.kind > P2pHeader::kPushed) {
    p.in_broken = true;
    peer_gone(p, kGarbled);
    return;
  }
  if (p.header.kind == P2pHeader::kPulled) {  // the peer has read (its part of) a single-copy send of ours
    const auto it = p.awaiting.find(p.header.seq);
    if (it != p.awaiting.end()) {
      it->second->pulled = true;
      bool pushing = false;
      for (const auto& push : p.pushes) pushing = pushing || push.op == it->second;
      if (!pushing) {
        finish(it->second, nullptr);
        p.awaiting.erase(it);
      }
    }
    return;
  }
  if (p.header.kind == P2pHeader::kShare) {  // the peer asks this rank to write the second half itself
    const auto it = p.awaiting.find(p.header.seq);
    if (it != p.awaiting.end()) {
      p.pushes.push_back(Peer::Push{it->second, p.header.from, static_cast<std::size_t>(p.header.bytes),
                                    it->second->bytes});
    }
    return;
  }
  if (p.header.kind == P2pHeader::kPushed) {  // the peer's half of a recv of ours is in
    const auto it = p.pushed_into.find(p.header.seq);
    if (it != p.pushed_into.end()) {
      finish(it->second, nullptr);
      p.pushed_into.erase(it);
    }
    return;
  }
  p.in_payload = true;
  p.remaining = p.header.bytes;
  p.pull_from = p.header.kind == P2pHeader::kPull ? p.header.from : 0;
  p.pull_seq = p.header.seq;
  p.pulled = 0;
  p.target = nullptr;
  p.reader = nullptr;
  p.to_unexpected = false;
  for (auto it = posted_.begin(); it != posted_.end(); ++it) {
    const std::shared_ptr<Op> op = *it;
    if ((op->peer != Communicator::kAnySource && op->peer != p.rank) || op->tag != p.header.tag) continue;
    posted_.erase(it);
    if (op->bytes != p.header.bytes) {
      finish(op, std::make_exception_ptr(MismatchError(describe(*op) + ": rank " + std::to_string(p.rank) + " sent " +
                                                       std::to_string(p.header.bytes) + " bytes, this recv holds " +
                                                       std::to_string(op->bytes))));
    } else {
      if (op->source) *op->source = p.rank;
      op->since = now;
      p.reader = op;
      p.target = op->data;
      if (p.pull_from && p.channel->peer_pulls()) {
        // Both sides copy: this rank the first half, the sender the rest, into op->data.
        const std::size_t half = op->bytes / 2 / 4096 * 4096;
        control(p, P2pHeader::kShare, p.pull_seq, reinterpret_cast<uint64_t>(op->data), half);
        p.remaining = half;
        op->pinned = true;
      }
    }
    if (p.remaining == 0) complete_message(p);
    return;
  }
  unexpected_.push_back(Unexpected{p.rank, p.header.tag, std::unique_ptr<char[]>(new char[p.header.bytes]),
                                   p.header.bytes, 0, false});
  p.holder = std::prev(unexpected_.end());
  p.to_unexpected = true;
  p.target = p.holder->data.get();
  if (p.remaining == 0) complete_message(p);
}

void PointToPoint::complete_message(Peer& p) {
  if (p.pull_from) {  // its sender may reuse its buffer now
    P2pHeader ack;
    ack.kind = P2pHeader::kPulled;
    ack.seq = p.pull_seq;
    p.acks.push_back(ack);
    p.pull_from = 0;
  }
  if (p.reader && p.reader->pinned) {
    p.pushed_into[p.pull_seq] = p.reader;  // the sender's half is still coming
  } else if (p.reader) {
    finish(p.reader, nullptr);
  }
  if (p.to_unexpected) p.holder->complete = true;
  p.reader = nullptr;
  p.to_unexpected = false;
  p.target = nullptr;
  p.in_payload = false;
}

void PointToPoint::check_timeouts(Clock::time_point now) {
  auto ms = [](std::chrono::milliseconds t) { return std::to_string(t.count()) + " ms"; };
  for (auto it = posted_.begin(); it != posted_.end();) {
    const std::shared_ptr<Op> op = *it;
    if (now - op->since < op->timeout) {
      ++it;
      continue;
    }
    it = posted_.erase(it);
    const std::string who = op->peer == Communicator::kAnySource ? "no rank" : rank_text(op->peer);
    finish(op, std::make_exception_ptr(TimeoutError(describe(*op) + ": timed out: " + who +
                                                        " sent a message with this tag within " + ms(op->timeout),
                                                    op->peer)));
  }
  for (auto& p : peers_) {
    if (p.reader && !p.reader->pinned && now - p.reader->since >= p.reader->timeout) {
      const std::shared_ptr<Op> op = p.reader;
      p.reader = nullptr;
      p.target = nullptr;  // the rest of the message is dropped as it arrives
      finish(op, std::make_exception_ptr(TimeoutError(describe(*op) + ": timed out: rank " + std::to_string(p.rank) +
                                                          " stopped sending it part-way (" + std::to_string(op->done) +
                                                          " bytes arrived) for " + ms(op->timeout),
                                                      p.rank)));
    }
    for (auto it = p.awaiting.begin(); it != p.awaiting.end();) {
      const std::shared_ptr<Op> op = it->second;
      if (now - op->since < op->timeout) {
        ++it;
        continue;
      }
      it = p.awaiting.erase(it);
      finish(op, std::make_exception_ptr(TimeoutError(
                     describe(*op) + ": timed out: rank " + std::to_string(p.rank) + " did not read it within " +
                         ms(op->timeout) + " (is its point-to-point thread running?)",
                     p.rank)));
    }
    while (!p.sends.empty()) {
      const std::shared_ptr<Op> op = p.sends.front();
      if (now - std::max(op->since, p.last_out) < op->timeout) break;
      const bool started = op->staged_done > 0 || op->header_done > 0;
      p.sends.pop_front();
      finish(op, std::make_exception_ptr(TimeoutError(
                     describe(*op) + ": timed out: rank " + std::to_string(p.rank) + " took no bytes for " +
                         ms(op->timeout) + " (is it receiving?)" +
                         (started ? "; part of the message had gone, so nothing more can be sent to it" : ""),
                     p.rank)));
      if (started) {  // its bytes cannot be taken back: the stream's framing is lost
        p.out_broken = true;
        fail_sends(p, kCutOff);
      }
    }
  }
}

void PointToPoint::check_peers(Clock::time_point now) {
  bool any_waits = false;
  for (const auto& op : posted_) any_waits = any_waits || op->peer == Communicator::kAnySource;
  for (auto& p : peers_) {
    if (!p.channel || !p.gone.empty()) continue;
    bool needed = any_waits || !p.sends.empty() || p.reader != nullptr || !p.awaiting.empty() ||
                  !p.pushed_into.empty();
    for (const auto& op : posted_) needed = needed || op->peer == p.rank;
    if (!needed) continue;
    const std::string why = p.channel->gone();
    if (why.empty()) continue;
    if (!p.in_broken) pump_in(p, now);  // what it wrote before it went
    peer_gone(p, why);
  }
}

void PointToPoint::peer_gone(Peer& p, const std::string& why) {
  if (p.gone.empty()) p.gone = why;
  auto error = [&](const Op& op, const std::string& more) {
    return std::make_exception_ptr(CommError(describe(op) + ": rank " + std::to_string(p.rank) + " " + p.gone + more,
                                             p.rank));
  };
  fail_sends(p, p.gone);
  if (p.reader) {
    finish(p.reader, error(*p.reader, " part-way through the message"));
    p.reader = nullptr;
  }
  for (auto& [seq, op] : p.pushed_into) finish(op, error(*op, " before it had written its half of the message"));
  p.pushed_into.clear();
  if (p.to_unexpected) {  // half a message nobody can complete
    unexpected_.erase(p.holder);
    p.to_unexpected = false;
  }
  p.target = nullptr;
  const bool any_left = any_source_possible();
  for (auto it = posted_.begin(); it != posted_.end();) {
    const std::shared_ptr<Op> op = *it;
    if (op->peer == p.rank || (op->peer == Communicator::kAnySource && !any_left)) {
      it = posted_.erase(it);
      finish(op, op->peer == p.rank ? error(*op, "") :
                 std::make_exception_ptr(CommError(describe(*op) + ": every other rank is gone")));
    } else {
      ++it;
    }
  }
}

void PointToPoint::fail_sends(Peer& p, const std::string& why) {
  p.pushes.clear();
  for (auto& [seq, op] : p.awaiting) {
    finish(op, std::make_exception_ptr(CommError(describe(*op) + ": rank " + std::to_string(p.rank) + " " + why, p.rank)));
  }
  p.awaiting.clear();
  while (!p.sends.empty()) {
    const std::shared_ptr<Op> op = p.sends.front();
    p.sends.pop_front();
    finish(op, std::make_exception_ptr(CommError(describe(*op) + ": rank " + std::to_string(p.rank) + " " + why, p.rank)));
  }
}

void PointToPoint::fail_all(const std::string& why) {
  std::vector<std::shared_ptr<Op>> left;
  {
    std::lock_guard<std::mutex> lock(mu_);
    left.swap(incoming_);
  }
  for (auto& p : peers_) {
    for (auto& op : p.sends) left.push_back(op);
    p.sends.clear();
    for (auto& [seq, op] : p.awaiting) left.push_back(op);
    p.awaiting.clear();
    if (p.reader) left.push_back(p.reader);
    p.reader = nullptr;
    for (auto& [seq, op] : p.pushed_into) left.push_back(op);
    p.pushed_into.clear();
  }
  for (auto& op : posted_) left.push_back(op);
  posted_.clear();
  for (auto& op : left) finish(op, std::make_exception_ptr(CommError(describe(*op) + ": " + why)));
}

}  // namespace muster::runtime::comm
