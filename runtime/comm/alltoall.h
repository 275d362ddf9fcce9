// Alltoall: every pair of ranks exchanges its blocks point to point, over a
// link of their own: a mesh channel in the host's ShmSegment (ranks of one
// host: the sender copies a segment into a slot, the receiver copies it out
// into place) or the mesh's TCP stream (ranks on different hosts: sent
// straight from the send buffer, received straight into place). Nothing is
// gathered or relayed: each byte crosses once, between its two ranks.
//
// The ranks know every block's size before this runs (the descriptor
// exchange carried the counts), so both ends of each link cut the same
// segments. Every rank polls all its links in one loop (sends to rank
// r + 1, r + 2, ... first, spreading the load), so no pair waits on another.
#pragma once

#include <cstddef>
#include <vector>

#include "runtime/comm/link.h"
#include "runtime/comm/watchdog.h"

namespace muster::runtime::comm {

// The link between this rank and one peer, and the segment size both ends use.
struct PeerLink {
  SendLink* send = nullptr;
  RecvLink* recv = nullptr;
  std::size_t segment_bytes = 0;
};

struct AlltoallPlan {
  int rank = 0;
  const char* send = nullptr;
  std::vector<std::size_t> send_offsets, send_bytes;  // by peer
  char* recv = nullptr;
  std::vector<std::size_t> recv_offsets, recv_bytes;  // by peer
};

// `links[r]`: the link to rank r (ignored for this rank).
void alltoall_pairwise(const AlltoallPlan& plan, const std::vector<PeerLink>& links, Watchdog& watchdog);

}  // namespace muster::runtime::comm
