#include "runtime/comm/shm/direct_allreduce.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "runtime/comm/chunking.h"
#include "runtime/comm/reduce.h"
#include "runtime/comm/shm/shm_link.h"
#include "runtime/error.h"

namespace muster::runtime::comm::shm {
namespace {

// Wakes every other rank of the host that may sleep waiting for us.
void ring_peers(ShmSegment& segment, int me) {
  for (int p = 0; p < segment.local_size(); ++p) {
    if (p != me) ring_doorbell(segment.peer(p));
  }
}

int world_rank_of(ShmSegment& segment, int local_rank) {
  return static_cast<int>(segment.peer(local_rank)->world_rank.load(std::memory_order_relaxed));
}

// Waits under the watchdog until `ready(p)` holds for every peer p, calling
// `on_ready(p)` once for each as soon as it does (in whatever order they come).
// `pending` is scratch space the caller keeps for the whole op, so the
// per-block waits allocate nothing.
template <typename Ready, typename OnReady>
void for_each_peer_when(ShmSegment& segment, int me, Watchdog& watchdog, std::vector<int>& pending, Ready ready,
                        OnReady on_ready) {
  const int n = segment.local_size();
  pending.clear();
  for (int k = 1; k < n; ++k) pending.push_back((me + k) % n);  // start right of us: spreads the readers
  while (!pending.empty()) {
    watchdog.prepare();
    bool moved = false;
    for (std::size_t i = 0; i < pending.size();) {
      if (ready(pending[i])) {
        on_ready(pending[i]);
        pending.erase(pending.begin() + static_cast<std::ptrdiff_t>(i));
        moved = true;
      } else {
        ++i;
      }
    }
    if (pending.empty()) return;
    if (moved) {
      watchdog.progressed();
    } else {
      watchdog.idle(world_rank_of(segment, pending.front()));
    }
  }
}

}  // namespace

void direct_allreduce(const SharedRegion& region, ShmSegment& segment, const DirectOp& op, uint64_t* blocks_done,
                      Watchdog& watchdog) {
  const int n = segment.local_size();
  const int me = region.local_rank();
  const std::size_t esize = dtype_size(op.dtype);
  DirectEntry* mine = segment.direct(me);
  const uint64_t seq = watchdog.seq();
  std::vector<int> pending;
  pending.reserve(static_cast<std::size_t>(n));

  // 1 + 2, block by block, the gather one block behind the reduction: by the
  // time this rank copies a peer's chunk of block b - 1, the peer has
  // usually published it, so neither waits for the other in lockstep.
  std::size_t block = op.count;
  if (op.block_bytes > 0) block = std::max<std::size_t>(op.block_bytes / esize, static_cast<std::size_t>(n));
  block = std::max<std::size_t>(std::min(block, op.count), 1);
  const uint64_t base = *blocks_done;
  const uint64_t blocks = (op.count + block - 1) / block;
  auto chunks_of = [&](uint64_t b) { return Chunking{std::min(block, op.count - b * block), n}; };
  auto at = [&](int rank, uint64_t b, int chunk) {
    return region.base(rank) + op.offset + (b * block + chunks_of(b).begin(chunk)) * esize;
  };
  auto gather = [&](uint64_t b) {
    for_each_peer_when(
        segment, me, watchdog, pending,
        [&](int p) { return segment.direct(p)->reduced.load(std::memory_order_acquire) >= base + b + 1; },
        [&](int p) { std::memcpy(at(me, b, p), at(p, b, p), chunks_of(b).length(p) * esize); });
  };
  for (uint64_t b = 0; b < blocks; ++b) {
    const std::size_t own = chunks_of(b).length(me);
    if (own > 0) {
      for (int k = 1; k < n; ++k) reduce_into(at(me, b, me), at((me + k) % n, b, me), own, op.dtype, op.op);
      if (op.op == ReduceOp::kAverage) divide(at(me, b, me), own, op.dtype, n);
    }
    mine->reduced.store(base + b + 1, std::memory_order_release);
    ring_peers(segment, me);
    if (b > 0) gather(b - 1);
  }
  gather(blocks - 1);
  *blocks_done = base + blocks;

  // 3. Finish: nobody reads our buffer once this returns.
  mine->finished.store(seq, std::memory_order_release);
  ring_peers(segment, me);
  for_each_peer_when(
      segment, me, watchdog, pending,
      [&](int p) { return segment.direct(p)->finished.load(std::memory_order_acquire) >= seq; },
      [](int) {});
}

}  // namespace muster::runtime::comm::shm
