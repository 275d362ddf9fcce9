// PointToPoint (point_to_point.h), on the wire: what a pass writes to each
// peer's channel (its acks, then headers and payloads from the callers'
// buffers; a single-copy send only its kPull) and what it reads (a header
// matched against the posted recvs, its payload streamed into the recv's
// buffer or an unexpected message; a kPull's bytes read from the sender's
// memory). Step b) of the pass in point_to_point.cc.
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

}  // namespace muster::runtime::comm
