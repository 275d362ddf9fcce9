// The direct allreduce: every rank of the job on one host, the buffer in a
// SharedRegion (so each rank can read the others' copies in place).
//
// The ranks have already compared their OpDescriptors (control_plane.h):
// every one is in this op, on the same region, offset, count, dtype and op.
// With N ranks each block of the buffer (block_bytes; the whole buffer when
// smaller) is cut into N chunks and local rank r owns chunk r:
//   1. reduce: rank r reduces chunk r of every peer's buffer into its own
//      (and divides it by N for kAverage), then publishes the block;
//   2. gather: rank r copies chunk p out of rank p's buffer as soon as p has
//      published the block;
//   3. finish: each rank publishes that it no longer reads the others and
//      waits for all to say the same, so no buffer changes while a peer
//      still reads it.
// Each byte crosses between cores once per phase with no staging copy: the
// ring (ring_allreduce.h) copies every segment into a slot and out again.
// A chunk is reduced by one rank and copied by the rest, so every rank ends
// with the same bits. Blocks keep the reduced chunk in cache until the
// peers copy it. Every wait goes through the Watchdog: a peer that stops
// publishing is named after the timeout, one that exits within 50 ms.
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

// Runs `op` on `region` as the op numbered watchdog.seq(). `blocks_done` counts the blocks this rank has
// reduced in all direct ops so far (the same on every rank); it is advanced.
void direct_allreduce(const SharedRegion& region, ShmSegment& segment, const DirectOp& op, uint64_t* blocks_done,
                      Watchdog& watchdog);

}  // namespace muster::runtime::comm::shm
