// One POSIX shared-memory segment per Communicator per host, shared by the
// ranks of that host. Layout (all 64-byte aligned):
//
//   Header     magic, local_size, slots per channel, slot bytes
//   PeerEntry  x local_size   pid, world rank, op sequence, heartbeat
//   DirectEntry x local_size  the direct allreduce's progress counters
//   Channel    x local_size   head, tail counters + `slots` slots
//
// Channel i is written only by local rank i (to its ring right neighbour)
// and read only by that neighbour: single producer, single consumer.
//
// Protocol (ShmSegment::create_shared, collective over the host's ranks):
//   a) local rank 0 creates "/muster-<pid>-<n>" (O_EXCL, 0600), sizes and
//      maps it, and writes the header;
//   b) it broadcasts the name (empty on failure) over the host communicator;
//   c) the others open and map it, and all agree (allreduce) whether every
//      rank succeeded;
//   d) after a barrier rank 0 unlinks the name, so nothing is left behind in
//      /dev/shm even if the job is killed; the mappings live on until unmap.
#pragma once

#include <mpi.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace muster::runtime::comm::shm {

struct alignas(64) PeerEntry {
  std::atomic<int64_t> pid;
  std::atomic<int64_t> world_rank;
  std::atomic<uint64_t> op_seq;
  std::atomic<int64_t> heartbeat_ms;  // CLOCK_MONOTONIC, shared by the host
  std::atomic<int64_t> blamed;
  // Futex word peers bump (and wake, if `sleeping`) when they publish into or
  // free a slot of a channel this rank uses.
  std::atomic<uint32_t> doorbell;
  std::atomic<uint32_t> sleeping;        // 0 healthy; 1 failed, culprit unknown; r + 2 failed blaming rank r
};

// A rank's side of the direct allreduce (direct_allreduce.h), written only
// by that rank and read by the others of its host. Counters only grow.
struct alignas(64) DirectEntry {
  // The op this rank has entered (its sequence number) and what it is: peers
  // check they all reduce the same buffer region, offset, count, dtype and op.
  std::atomic<uint64_t> arrived;
  std::atomic<uint64_t> region;  // 0: this op is not a direct allreduce
  std::atomic<uint64_t> offset;
  std::atomic<uint64_t> count;
  std::atomic<uint64_t> kind;    // dtype * 16 + op
  // Blocks whose own chunk this rank has reduced, over all direct ops so far.
  std::atomic<uint64_t> reduced;
  // The last op in which this rank has finished reading the others' buffers.
  std::atomic<uint64_t> finished;
};

struct ChannelHeader {
  alignas(64) std::atomic<uint64_t> head;  // segments published (producer)
  alignas(64) std::atomic<uint64_t> tail;  // segments released (consumer)
};

// Maps `bytes` of the POSIX shared-memory object `name` read-write: when
// `create`, a new one (O_EXCL, 0600) whose pages are reserved first with
// posix_fallocate, so a full /dev/shm fails here rather than with SIGBUS on
// first touch (and the name is unlinked again); else an existing one. Null
// on failure.
char* map_shared_object(const char* name, std::size_t bytes, bool create);

class ShmSegment {
 public:
  // Collective over `local_comm`. Returns null on every rank when any rank
  // could not create or map the segment (callers then fall back to MPI).
  static std::unique_ptr<ShmSegment> create_shared(MPI_Comm local_comm, std::size_t slots,
                                                   std::size_t slot_bytes);
  ~ShmSegment();
  ShmSegment(const ShmSegment&) = delete;
  ShmSegment& operator=(const ShmSegment&) = delete;

  int local_size() const { return local_size_; }
  std::size_t slots() const { return slots_; }
  std::size_t slot_bytes() const { return slot_bytes_; }
  PeerEntry* peer(int local_rank) const;
  DirectEntry* direct(int local_rank) const;
  ChannelHeader* channel(int local_rank) const;
  char* slot(int local_rank, std::size_t index) const;

 private:
  ShmSegment(void* base, std::size_t bytes, int local_size, std::size_t slots, std::size_t slot_bytes);
  static std::size_t layout_bytes(int local_size, std::size_t slots, std::size_t slot_bytes);
  std::size_t channel_offset(int local_rank) const;

  char* base_;
  std::size_t bytes_;
  int local_size_;
  std::size_t slots_;
  std::size_t slot_bytes_;
};

}  // namespace muster::runtime::comm::shm
