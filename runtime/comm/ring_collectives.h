// The ring's other collectives, over the same SendLink to the right
// neighbour and RecvLink from the left one as ring_allreduce.h. The ranks
// have compared their OpDescriptors before any of these runs, so both ends
// of every link cut the same segments (at most `segment_bytes` each).
//
// ring_broadcast: a chain from the root. Rank d steps right of the root
//   receives each segment from its left neighbour straight into its buffer
//   and forwards it to its right one (the rank left of the root only
//   receives), so segment k+1 arrives while segment k moves on: N - 1 hops
//   of latency, each byte over each link once.
// ring_allgatherv: N - 1 steps; in step s rank r sends block (r - s) mod N
//   and receives block (r - s - 1) mod N into place. Blocks may differ in
//   size (allgather: all the same).
// ring_reducescatter: N - 1 steps; in step s rank r sends chunk
//   (r - s - 1) mod N and receives chunk (r - s - 2) mod N, reducing each
//   arriving segment into its running copy of that chunk; after the last
//   step rank r holds the full reduction of chunk r (divided by N for
//   kAverage). The input is never written: the running copies alternate
//   between two scratch buffers of the largest chunk, and the last step
//   lands in `recv`.
#pragma once

#include <cstddef>
#include <vector>

#include "runtime/comm/communicator.h"
#include "runtime/comm/link.h"
#include "runtime/comm/watchdog.h"

namespace muster::runtime::comm {

struct RingPeers {
  int rank = 0;
  int size = 1;
  std::size_t segment_bytes = 256 * 1024;
};

// `data` holds `bytes`; on the root it is sent, elsewhere overwritten.
void ring_broadcast(void* data, std::size_t bytes, int root, const RingPeers& ring, SendLink& send, RecvLink& recv,
                    Watchdog& watchdog);

// `recv` holds every block, rank i's `block_bytes[i]` bytes at
// `block_offsets[i]`; this rank's own block must already be in place.
void ring_allgatherv(char* recv, const std::vector<std::size_t>& block_offsets,
                     const std::vector<std::size_t>& block_bytes, const RingPeers& ring, SendLink& send,
                     RecvLink& recv_link, Watchdog& watchdog);

// `send` holds sum(counts) elements (rank i's chunk at sum(counts[0..i)));
// `recv` receives this rank's counts[rank] elements of the reduction.
void ring_reducescatter(const void* send, void* recv, const std::vector<std::size_t>& counts, DataType dtype,
                        ReduceOp op, const RingPeers& ring, SendLink& send_link, RecvLink& recv_link,
                        Watchdog& watchdog);

}  // namespace muster::runtime::comm
