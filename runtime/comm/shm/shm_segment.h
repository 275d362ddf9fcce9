// One POSIX shared-memory segment per Communicator per host, shared by the
// ranks of that host. Layout (all 64-byte aligned):
//
//   Header        magic, the layout's sizes (every rank checks them)
//   PeerEntry     x local_size   pid, world rank, op sequence, heartbeat, doorbell
//   DirectEntry   x local_size   the direct allreduce's progress counters
//   ControlSlot   x local_size x 2   the descriptor exchange (control_plane.h):
//                                    a sequence word, then the record and
//                                    up to control_bytes of payload
//   ring channel  x local_size   head, tail + ring_slots slots (local rank i
//                                writes channel i, its ring right neighbour reads it)
//   mesh channel  x local_size^2 head, tail + mesh_slots slots (channel
//                                (i, j): local rank i to local rank j, alltoall)
//   small ops     small_bytes    the SmallOps area (small_ops.h), when the
//                                whole world shares this host
//   p2p bell      x local_size   the point-to-point thread's futex word (p2p_ring.h)
//   p2p ring      x local_size^2 head, tail + p2p_bytes of bytes (ring (i, j):
//                                local rank i's messages to local rank j)
//
// Every channel has a single producer and a single consumer.
//
// Formation (formation.cc, over the Bootstrap): the host's lowest rank
// create()s "/muster-<pid>-<n>" (O_EXCL, 0600, pages reserved with
// posix_fallocate so a full /dev/shm fails here, not with SIGBUS later) and
// publishes the name; the others open() it and check the header against
// their own layout; once every rank of the host said whether it mapped the
// segment, the creator unlinks the name, so nothing is left in /dev/shm even
// if the job is killed. The mappings live until each rank unmaps.
#pragma once

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
  std::atomic<int64_t> blamed;        // 0 healthy; 1 failed, culprit unknown; r + 2 failed blaming rank r
  // Futex word peers bump (and wake, if `sleeping`) when they publish into or
  // free a slot of a channel this rank uses, or publish a control record.
  std::atomic<uint32_t> doorbell;
  std::atomic<uint32_t> sleeping;
  std::atomic<uint32_t> closed;  // 1 once this rank's Communicator is being destroyed
  std::atomic<uint64_t> done_seq;  // the last op this rank completed
};

// A rank's side of the direct allreduce (direct_allreduce.h), written only
// by that rank and read by the others of its host. Counters only grow.
struct alignas(64) DirectEntry {
  // The last op in which this rank has finished reading and writing the
  // others' buffers.
  std::atomic<uint64_t> finished;
};

// One of a rank's two control slots: `seq` says which exchange the bytes
// after it belong to (written last, with release).
struct alignas(64) ControlSlot {
  std::atomic<uint64_t> seq;
};

struct ChannelHeader {
  alignas(64) std::atomic<uint64_t> head;  // segments published (producer)
  alignas(64) std::atomic<uint64_t> tail;  // segments released (consumer)
};

// A point-to-point thread's line: peers bump `bell` (and wake it, if
// `sleeping`) when they write into or read out of a ring it uses. For
// single-copy sends (p2p_ring.h): `probe` is the address of a word in this
// rank's memory holding kP2pProbe, and bit j of `pulls_from` says this rank
// has read local rank j's probe (so it can read that rank's buffers).
struct alignas(64) P2pBell {
  std::atomic<uint32_t> bell;
  std::atomic<uint32_t> sleeping;
  std::atomic<uint64_t> probe;
  std::atomic<uint64_t> pulls_from;
};

// A single-producer single-consumer ring of bytes: `head` counts the bytes
// ever written, `tail` those ever read.
struct ByteRingView {
  ChannelHeader* header = nullptr;
  char* data = nullptr;
  std::size_t capacity = 0;
};

// One single-producer single-consumer channel inside the segment.
struct ChannelView {
  ChannelHeader* header = nullptr;
  char* slots = nullptr;
  std::size_t n_slots = 0;
  std::size_t slot_bytes = 0;
  char* slot(uint64_t index) const { return slots + (index % n_slots) * slot_bytes; }
};

struct SegmentLayout {
  int local_size = 1;
  std::size_t ring_slots = 8;
  std::size_t ring_slot_bytes = 256 * 1024;  // rounded up to 64
  std::size_t control_bytes = 4096;          // payload per control slot, rounded up to 64
  std::size_t mesh_slots = 0;                // 0: no mesh channels
  std::size_t mesh_slot_bytes = 0;
  std::size_t small_bytes = 0;               // 0: no SmallOps area
  std::size_t p2p_bytes = 0;                 // per point-to-point ring; 0: none
  // Offsets of each area from the segment's start.
  std::size_t peers_offset() const;
  std::size_t direct_offset() const;
  std::size_t control_offset() const;
  std::size_t control_slot_bytes() const;  // ControlSlot + record header + payload
  std::size_t ring_offset() const;
  std::size_t ring_channel_bytes() const;
  std::size_t mesh_offset() const;
  std::size_t mesh_channel_bytes() const;
  std::size_t small_offset() const;
  std::size_t p2p_offset() const;
  std::size_t p2p_ring_bytes() const;
  std::size_t total_bytes() const;
  SegmentLayout rounded() const;  // slot sizes rounded up to 64 bytes
};

// Maps `bytes` of the POSIX shared-memory object `name` read-write: when
// `create`, a new one (O_EXCL, 0600) whose pages are reserved first with
// posix_fallocate, so a full /dev/shm fails here rather than with SIGBUS on
// first touch (and the name is unlinked again); else an existing one. Null
// on failure.
char* map_shared_object(const char* name, std::size_t bytes, bool create);

class ShmSegment {
 public:
  // A new segment with a fresh name (written to *name); null on failure.
  static std::unique_ptr<ShmSegment> create(const SegmentLayout& layout, std::string* name);
  // An existing segment; null when it cannot be mapped or its header does
  // not match `layout`.
  static std::unique_ptr<ShmSegment> open(const std::string& name, const SegmentLayout& layout);
  static void unlink(const std::string& name);
  ~ShmSegment();
  ShmSegment(const ShmSegment&) = delete;
  ShmSegment& operator=(const ShmSegment&) = delete;

  const SegmentLayout& layout() const { return layout_; }
  int local_size() const { return layout_.local_size; }
  PeerEntry* peer(int local_rank) const;
  DirectEntry* direct(int local_rank) const;
  ControlSlot* control(int local_rank, int parity) const;
  ChannelView ring_channel(int producer) const;
  ChannelView mesh_channel(int producer, int consumer) const;
  // The SmallOps area (layout().small_bytes of them), or null.
  void* small_area() const;
  // The point-to-point doorbell of a local rank, and the ring from
  // `producer` to `consumer` (empty views without p2p_bytes).
  P2pBell* p2p_bell(int local_rank) const;
  ByteRingView p2p_ring(int producer, int consumer) const;

 private:
  ShmSegment(char* base, const SegmentLayout& layout);

  char* base_;
  SegmentLayout layout_;
};

}  // namespace muster::runtime::comm::shm
