// The engine's state, shared by its three units (point_to_point.h's
// PointToPoint): point_to_point.cc (the queue, the thread's pass, matching),
// point_to_point_wire.cc (what goes on and comes off each peer's channel)
// and point_to_point_failures.cc (timeouts, peers gone). Not for use
// outside them.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <list>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "runtime/comm/point_to_point.h"

namespace muster::runtime::comm {

// The engine's constants (its units say `using namespace p2p_engine;`).
namespace p2p_engine {

inline constexpr auto kPeerCheckPeriod = std::chrono::milliseconds(50);
inline constexpr std::size_t kStagedBytes = 4096;          // header and payload in one write below this
inline constexpr std::size_t kBytesPerPump = 8u << 20;     // then the other peers get their turn
inline constexpr std::size_t kPullPiece = 4u << 20;        // bytes one process_vm_readv reads
inline constexpr uint32_t kMagic = P2pHeader{}.magic;
inline const char* const kCutOff = "is cut off: an earlier send to it timed out part-way";
inline const char* const kGarbled = "sent bytes that are no point-to-point message (a different muster version?)";

inline std::string rank_text(int r) { return r == Communicator::kAnySource ? "any rank" : "rank " + std::to_string(r); }

}  // namespace p2p_engine


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

}  // namespace muster::runtime::comm
