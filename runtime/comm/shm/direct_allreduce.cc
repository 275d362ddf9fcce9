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

// Waits under the watchdog until `ready(p)` holds for every peer p (in
// whatever order they come). `pending` is scratch space.
template <typename Ready>
void wait_for_peers(ShmSegment& segment, int me, Watchdog& watchdog, std::vector<int>& pending, Ready ready) {
  const int n = segment.local_size();
  pending.clear();
  for (int k = 1; k < n; ++k) pending.push_back((me + k) % n);
  while (!pending.empty()) {
    watchdog.prepare();
    const std::size_t before = pending.size();
    pending.erase(std::remove_if(pending.begin(), pending.end(), ready), pending.end());
    if (pending.empty()) return;
    if (pending.size() < before) {
      watchdog.progressed();
    } else {
      watchdog.idle(world_rank_of(segment, pending.front()));
    }
  }
}

}  // namespace

void direct_allreduce(const SharedRegion& region, ShmSegment& segment, const DirectOp& op, Watchdog& watchdog) {
  const int n = segment.local_size();
  const int me = region.local_rank();
  const std::size_t esize = dtype_size(op.dtype);
  const uint64_t seq = watchdog.seq();
  std::vector<int> pending;
  pending.reserve(static_cast<std::size_t>(n));

  std::size_t block = op.count;
  if (op.block_bytes > 0) block = std::max<std::size_t>(op.block_bytes / esize, static_cast<std::size_t>(n));
  block = std::max<std::size_t>(std::min(block, op.count), 1);
  const std::size_t piece = std::max<std::size_t>(kPieceBytes / esize, 1);
  auto at = [&](int rank, std::size_t element) { return region.base(rank) + op.offset + element * esize; };
  for (std::size_t start = 0; start < op.count; start += block) {
    const Chunking chunks{std::min(block, op.count - start), n};
    const std::size_t first = start + chunks.begin(me);
    const std::size_t own = chunks.length(me);
    for (std::size_t done = 0; done < own; done += piece) {
      const std::size_t len = std::min(piece, own - done);
      char* result = at(me, first + done);
      for (int k = 1; k < n - 1; ++k) reduce_into(result, at((me + k) % n, first + done), len, op.dtype, op.op);
      if (n > 1) reduce_last_into(result, at((me + n - 1) % n, first + done), len, op.dtype, op.op, n);
      for (int k = 1; k < n; ++k) std::memcpy(at((me + k) % n, first + done), result, len * esize);
    }
  }

  // Finish: nobody reads or writes our buffer once this returns.
  segment.direct(me)->finished.store(seq, std::memory_order_release);
  ring_peers(segment, me);
  wait_for_peers(segment, me, watchdog, pending,
                 [&](int p) { return segment.direct(p)->finished.load(std::memory_order_acquire) >= seq; });
}

}  // namespace muster::runtime::comm::shm
