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
#pragma once

#include <cstddef>

#include "muster/runtime/comm/communicator.h"
#include "muster/runtime/comm/link.h"
#include "muster/runtime/comm/watchdog.h"

namespace muster::runtime::comm {

struct RingContext {
  int rank = 0;
  int size = 1;
  std::size_t segment_bytes = 256 * 1024;
};

void ring_allreduce(void* data, std::size_t count, DataType dtype, ReduceOp op, const RingContext& ctx,
                    SendLink& send, RecvLink& recv, Watchdog& watchdog);

}  // namespace muster::runtime::comm
