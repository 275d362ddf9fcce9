// The direct allreduce: every rank of the job on one host, the buffer in a
// SharedRegion (so each rank can read the others' copies in place).
//
// The ranks have already compared their OpDescriptors (control_plane.h):
// every one is in this op, on the same region, offset, count, dtype and op.
// With N ranks each block of the buffer (block_bytes; the whole buffer when
// smaller) is cut into N chunks and local rank r owns chunk r. Rank r, piece
// by piece of its chunk (kPieceBytes, so the piece stays in cache), reduces
// the piece of every peer's buffer into its own (and divides it by N for
// kAverage), then writes the result back into every peer's buffer. Then
// each rank publishes that it has finished with the others' buffers and
// waits for all to say the same, so none returns while a peer still reads
// or writes its buffer.
// Every line of every buffer is read once (by the rank that owns its chunk)
// and written once, and the write hits a line that rank has just read: no
// staging copy (the ring copies every segment into a slot and out again)
// and no second pass. An earlier design reduced into the owner's buffer
// only and had every peer copy the result out afterwards; that second pass
// fetched each line again from the owner's cache, and measured 1.3-1.6x
// slower on 102 MB (2 ranks, same run).
// A chunk is reduced by one rank and copied by it to the rest, so every rank
// ends with the same bits. Writing into a peer's buffer is safe because the
// descriptor exchange before this op (control_plane.h) has every rank in the
// op already, and only chunk r's owner touches chunk r anywhere. The wait
// goes through the Watchdog: a peer that stops publishing is named after the
// timeout, one that exits within 50 ms.
#pragma once

#include <cstddef>
#include <cstdint>

#include "runtime/comm/communicator.h"
#include "runtime/comm/shm/shared_region.h"
#include "runtime/comm/shm/shm_segment.h"
#include "runtime/comm/watchdog.h"

namespace muster::runtime::comm::shm {

struct DirectOp {
  uint64_t region_id = 0;  // which SharedRegion (allocation order, from 1)
  std::size_t offset = 0;  // bytes from the region's start
  std::size_t count = 0;
  DataType dtype = DataType::kFloat32;
  ReduceOp op = ReduceOp::kSum;
  std::size_t block_bytes = 0;  // 0: one block
};

// Pieces of a chunk reduced and written back at a time: small enough to stay
// in a core's L2 between the reduction and the write-back.
inline constexpr std::size_t kPieceBytes = 64 * 1024;

// Runs `op` on `region` as the op numbered watchdog.seq().
void direct_allreduce(const SharedRegion& region, ShmSegment& segment, const DirectOp& op, Watchdog& watchdog);

}  // namespace muster::runtime::comm::shm
