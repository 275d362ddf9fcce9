// Point-to-point messages between the ranks of one Communicator
// (Communicator::send_async / recv_async; torch.distributed's send, recv,
// isend, irecv, batch_isend_irecv and recv from any source).
//
// Contract
// - A message is (tag, bytes) from one rank to another. A recv names its
//   sender, or kAnySource, and a tag; it takes the oldest message that
//   matches. Between one pair with one tag messages arrive in the order they
//   were sent; a recv from any source takes the first matching message to
//   arrive from any rank.
// - A recv whose size differs from the matching message's fails with
//   MismatchError naming the sender and both sizes; the message is dropped.
// - A send completes once its bytes have left the caller's buffer. The
//   receiving engine drains every message as it arrives: straight into the
//   buffer of the recv it matches, else into memory of its own (an
//   "unexpected" message) until a recv claims it. So a send never waits for
//   its recv to be posted, only for room in the stream (one ring of the
//   segment, or the sockets' buffers), and two ranks that send to each other
//   before receiving do not deadlock.
// - Timeouts (P2pOptions::timeout, else the Communicator's): a recv that no
//   message matched, or an op whose bytes stopped moving, fails with
//   TimeoutError naming the peer, and is withdrawn. A send whose first bytes
//   are already in the stream cannot be withdrawn without breaking the
//   framing: every later send to that peer then fails with CommError (its
//   messages to this rank still arrive).
// - A peer that is gone (exited, closed its Communicator, its stream broke)
//   fails the ops that still need it with CommError naming it; what it sent
//   before it went can still be received. A recv from any source fails only
//   once every peer is gone.
// - None of this touches the collectives: their order, their links and
//   their broken state are their own.
// - Closing (the destructor) fails the ops still pending with CommError.
//
// Threads: send() and recv() from any thread. The engine's own thread moves
// the bytes, matches messages to recvs, and completes the Handles; it calls
// nothing of the caller's. It runs from construction, so a rank drains what
// its peers send before it has posted anything; idle, it sleeps on the
// waiter (a peer's write, or a caller, wakes it).
//
// Wire format, on every channel: a 48-byte header, then for kData the
// bytes. Single copy: where the channel lets the receiver read the sender's
// memory (P2pChannel::peer_pulls: process_vm_readv between ranks of one
// host), a send of at least kPullMinBytes writes only a kPull header naming
// its buffer; the receiving engine reads the bytes straight from it into
// the recv's buffer (or its own memory) as soon as the header arrives, and
// answers kPulled; the send completes then. Each byte is copied once, by the
// receiver, instead of into the ring and out again. A message whose recv is
// already posted is copied by both engines at once: the receiver answers the kPull with kShare (its buffer's address and
// where the sender's half starts), reads the first half while the sender
// writes the second straight into the recv's buffer (process_vm_writev),
// then sends kPushed; the recv completes once both halves are in, the send
// once it has had kPulled and written its half. The receiver's recv cannot
// time out while the sender writes into it.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "runtime/comm/communicator.h"
#include "runtime/comm/p2p_channel.h"

namespace muster::runtime::comm {

struct P2pHeader {
  enum Kind : uint32_t { kData = 1, kPull = 2, kPulled = 3, kShare = 4, kPushed = 5 };
  uint32_t magic = 0x5032504d;  // "MP2P"
  uint32_t kind = kData;
  int64_t tag = 0;
  uint64_t bytes = 0;   // the message's (kData, kPull)
  uint64_t from = 0;    // kPull: the bytes' address in the sender; kShare: the recv buffer's in the receiver
  uint64_t seq = 0;     // kPull .. kPushed: which send, counted per pair
  uint64_t reserved = 0;
};
static_assert(sizeof(P2pHeader) == 48, "the header is part of the wire format");

class PointToPoint {
 public:
  // Sends of at least this many bytes go single-copy where the channel offers
  // it. Below, the ring's two copies run at once and their data stays in the
  // cache: 2 ranks, torch tensors, both ways alternated in one job, the ring
  // was 1.4-1.6x faster at 256 KB-1 MB and 1.25-1.35x at 4-16 MB; single copy
  // 1.2x faster at 32 MB and 1.4x at 64 MB (runtime/comm/README.md).
  static constexpr std::size_t kPullMinBytes = 32u << 20;

  // `channels` by rank: null for this rank and ranks it has no channel to.
  // `timeout`: the default of P2pOptions::timeout; `spin`: how long the
  // thread polls before it sleeps while ops are pending.
  PointToPoint(int rank, int size, std::vector<std::unique_ptr<P2pChannel>> channels,
               std::unique_ptr<P2pWaiter> waiter, std::chrono::milliseconds timeout,
               std::chrono::microseconds spin);
  ~PointToPoint();
  PointToPoint(const PointToPoint&) = delete;
  PointToPoint& operator=(const PointToPoint&) = delete;

  Handle send(const void* data, std::size_t bytes, int dst, const P2pOptions& options);
  Handle recv(void* data, std::size_t bytes, int src, const P2pOptions& options, int* source);

 private:
  using Clock = std::chrono::steady_clock;
  struct Op;
  struct Unexpected;
  struct Peer;

  Handle submit(std::shared_ptr<Op> op);
  void run();
  // Everything below runs on the engine's thread.
  void admit(const std::shared_ptr<Op>& op, Clock::time_point now);
  bool pump_out(Peer& p, Clock::time_point now);
  bool pump_pushes(Peer& p, Clock::time_point now);
  void control(Peer& p, P2pHeader::Kind kind, uint64_t seq, uint64_t from = 0, uint64_t bytes = 0);
  void wait_for_copies(std::chrono::milliseconds at_most);
  bool pump_in(Peer& p, Clock::time_point now);
  void on_header(Peer& p, Clock::time_point now);
  void complete_message(Peer& p);
  void claim(const std::shared_ptr<Op>& op, std::list<Unexpected>::iterator u);
  void check_timeouts(Clock::time_point now);
  void check_peers(Clock::time_point now);
  void peer_gone(Peer& p, const std::string& why);
  void fail_sends(Peer& p, const std::string& why);
  bool any_source_possible() const;
  bool has_work() const;
  void finish(const std::shared_ptr<Op>& op, std::exception_ptr error);
  void fail_all(const std::string& why);
  std::string describe(const Op& op) const;

  int rank_;
  int size_;
  std::chrono::milliseconds timeout_;
  std::chrono::microseconds spin_;
  std::vector<Peer> peers_;  // by rank
  std::unique_ptr<P2pWaiter> waiter_;

  // Shared with the callers' threads.
  std::mutex mu_;
  std::vector<std::shared_ptr<Op>> incoming_;
  bool stopping_ = false;
  std::thread thread_;  // started by the constructor: it drains what peers send before any op here

  // The engine's thread only.
  std::list<std::shared_ptr<Op>> posted_;   // recvs no message matched yet, in the order posted
  std::list<Unexpected> unexpected_;        // messages no recv matched yet, in the order they arrived
  Clock::time_point next_peer_check_{};
};

}  // namespace muster::runtime::comm
