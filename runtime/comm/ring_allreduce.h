// muster's bandwidth-optimal ring allreduce over a SendLink to the right
// neighbour and a RecvLink from the left one.
//
// With N ranks the buffer is cut into N chunks (sizes differ by at most one
// element) and each chunk into segments of at most `segment_bytes`.
//   a) Reduce-scatter, steps s = 0 .. N-2: rank r sends chunk (r - s) mod N
//      and receives chunk (r - s - 1) mod N, reducing each arriving segment
//      into its own buffer. Afterwards rank r holds the full reduction of
//      chunk (r + 1) mod N; for kAverage it divides that chunk by N here, so
//      every element is divided exactly once.
//   b) Allgather, steps s = 0 .. N-2: rank r sends chunk (r + 1 - s) mod N
//      and receives chunk (r - s) mod N, copying it into place.
// Within a step sending and receiving are interleaved segment by segment, up
// to the link's in-flight depth, so the left neighbour's next segment
// arrives while this rank reduces the current one and the right neighbour
// drains the one before. Each rank sends and receives 2 (N-1)/N of the
// buffer in total, whatever N is.
//
// Blocks. A buffer larger than `block_bytes` is reduced block by block: the
// whole ring (both phases) runs over the first block_bytes of the buffer,
// then the next, so the chunk a rank reduces in the reduce-scatter is still
// in its cache when the allgather sends it, and the bytes the allgather
// copies are fresh in the neighbour's. Without blocks a 64 MB buffer streams
// through memory four times per rank and the ring ran at a fifth of the
// speed it has on cache-sized buffers (bench/allreduce). Every rank has the
// same count, so all cut the same blocks and the links see the same segment
// sequence; blocks are invisible outside this function (one op, one op
// number, one watchdog that restarts at every segment). block_bytes = 0
// runs the whole buffer as one block.
#pragma once

#include <cstddef>
#include <cstdint>

#include "runtime/comm/communicator.h"
#include "runtime/comm/link.h"
#include "runtime/comm/watchdog.h"

namespace muster::runtime::comm {

struct RingContext {
  int rank = 0;
  int size = 1;
  std::size_t segment_bytes = 256 * 1024;
  std::size_t block_bytes = 0;  // 0: the whole buffer is one block
};

void ring_allreduce(void* data, std::size_t count, DataType dtype, ReduceOp op, const RingContext& ctx,
                    SendLink& send, RecvLink& recv, Watchdog& watchdog);

// The block of a ring whose every link is TCP and whose bytes the progress
// thread moves itself (no I/O threads), for `ranks` ranks whose links'
// largest round trip is `round_trip_us` (0: unknown). A short round trip
// (at most 100 us): 256 KB a rank, 1 MB at least and 4 MB at most, so a
// block's reduce-scatter is still in cache for its allgather and for the
// kernel's copies. A long or unknown one: 4 MB, so each chunk still
// outlasts a hop on the wire (runtime/comm/README.md, "On a shaped link").
std::size_t tcp_inline_block_bytes(uint32_t round_trip_us, int ranks);

}  // namespace muster::runtime::comm
