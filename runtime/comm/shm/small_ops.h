// SmallOps: latency-bound collectives between the ranks of one host, through
// one block of shared memory they all map. Allreduce, broadcast, allgather
// and barrier, and the descriptor exchange a larger op makes before its data
// moves. An op of more than capacity() bytes per rank runs as one round per
// capacity()-sized piece (where ranks outnumber CPUs, and where there are
// just 2, the Communicator sends every allreduce of the caller's own memory
// here: see "Pieces" below).
//
// Layout of the area (area_bytes(); every part 64-byte aligned; all zero is
// the valid initial state, so any zeroed mapping works):
//   RankState x n      doorbell (futex word) and `sleeping`; `reduced`
//   Slot x n x 2       per rank and op parity: a line with the op's
//                      OpDescriptor, then the line peers poll (the round it
//                      holds, the payload's size, the descriptor's digest)
//                      where the payload's capacity bytes begin
//
// Protocol of round k (every op, or piece of one, is one round, numbered 1,
// 2, ... alike on every rank; parity k % 2 picks the slot):
//   a) arrive: the rank writes its contribution (allreduce: all but its own
//      chunk when two-phase, see c; allgather; the root's data for
//      broadcast; nothing for barrier) into its slot of
//      parity k % 2, then the descriptor and round k into the slot's header
//      (release), and rings the doorbell of any peer asleep;
//   b) check: it waits until every rank's slot of that parity says round k,
//      and compares the n descriptors; if any differs, a second round swaps
//      the ops' names (to quote them) and every rank throws the same
//      MismatchError, before anyone read a byte of data; the next op runs
//      normally;
//   c) move: flat allreduce (at most flat_max_bytes, pair_flat_max_bytes
//      with 2 ranks): every rank reduces all n slots, in rank order, into
//      its buffer, so every rank computes the same bits; larger allreduce
//      (two-phase): rank r reduces chunk r (chunking.h) of every peer's
//      slot into its own buffer, copies the result into its slot,
//      publishes `reduced` = k, and every rank copies chunk p out of rank
//      p's slot once p has published it (no peer reads a rank's own chunk,
//      so it is never copied in);
//      broadcast: copy out of the root's slot; allgather: copy every slot.
// No rank ever waits for the others to finish reading: a rank writes its
// parity-p slot again only in round k + 2, which it enters after seeing every
// peer arrive in round k + 1, and a peer arrives in k + 1 only after it has
// finished reading round k. So each round costs one wait (flat) or two.
//
// Pieces: an op larger than capacity() runs as rounds of capacity() bytes
// per rank, each a round as above with the whole op's descriptor (so a
// mismatch shows in the first, before any data moved). Each piece's chunk is
// reduced by one rank alone, so the result's bits are the same everywhere.
// With more ranks than CPUs this beats the ring, which waits for a
// descheduled neighbour at every one of its 2 (n - 1) steps per block, while
// a piece waits twice and the slots (2 x n x capacity) stay in the cache; on
// 2 ranks it matches or beats it (runtime/comm/README.md has the figures).
//
// Waiting: spin on the peers' headers (bounded by `spin`; ranks that share
// CPUs poll with sched_yield for `yield` instead), then sleep on this rank's
// futex doorbell, with that budget afresh for each round of an op (one
// budget for all of a 16 MB op's pieces slept at every wait past the first
// 100 us: 3.2 GB/s against 5.7); past it, every wait goes through a Watchdog
// built then (none on the fast path): a peer that does not arrive within
// `timeout` raises TimeoutError naming it (through the PeerMonitor's blame),
// one that exited raises CommError naming it within ~50 ms.
//
// exchange() is the bare round (a descriptor and any payload up to capacity,
// no comparison): on a world whose ranks all share this host it is the
// Communicator's control plane (control_plane.h), so every op, whatever path
// it then takes, meets its peers in the same numbered round.
//
// Nothing here depends on MPI or on how the area was mapped: tests run ranks
// as threads over ordinary memory.
//
// Threads: one thread at a time per SmallOps (the Communicator's progress
// thread, or the caller's thread running a synchronous op inline).
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "runtime/comm/communicator.h"
#include "runtime/comm/op_descriptor.h"
#include "runtime/comm/watchdog.h"
#include "runtime/dtype.h"

namespace muster::runtime::comm::shm {

struct SmallOpsOptions {
  // Bytes one rank contributes at most (allreduce, broadcast: the buffer;
  // allgather: its send block).
  std::size_t capacity = 256 * 1024;
  // An allreduce up to this many bytes is flat (one wait); above it, each
  // rank reduces its chunk and the others copy it (two waits, 1/n of the
  // reduction each).
  std::size_t flat_max_bytes = 8 * 1024;
  // With 2 ranks, flat up to this many bytes instead: there both ways move
  // the peer's whole payload across (two-phase: half in, half back), and
  // flat waits once; its price, reducing the whole payload on both ranks,
  // is small while the payload stays in the core's cache. 2 ranks, this VM,
  // old and new binaries alternated: 16 KB 7.0-7.3 -> 9.0-9.3 GB/s, 32 KB
  // 3.3 -> 2.5-2.7 us, 64 KB 13.2-13.4 -> 14.7-15.3 GB/s; 128-256 KB no
  // better flat, so two-phase stays there.
  std::size_t pair_flat_max_bytes = 64 * 1024;
  // Spin this long on the peers' flags, then poll them with sched_yield
  // between polls for `yield`, then sleep on the doorbell.
  std::chrono::microseconds spin{50};
  std::chrono::microseconds yield{0};
  // A peer silent this long -> TimeoutError.
  std::chrono::milliseconds timeout{60000};
  // The clock of the spin and the timeout (a seam: tests pass a fake one).
  Watchdog::NowFn now = &Watchdog::Clock::now;
  // While *abort is true a wait that went past the spin throws CommError
  // (the Communicator is closing; null: never).
  const std::atomic<bool>* abort = nullptr;
};

// What one rank published in a round.
struct SmallRecord {
  OpDescriptor desc;
  const char* payload = nullptr;  // in that rank's slot (for this rank: its own)
  std::size_t bytes = 0;
};

// A block of shared memory SmallOps runs on: either mapped by several
// processes, or any zeroed, 64-byte aligned memory shared by threads.
struct SmallOpsArea {
  void* base = nullptr;
  int local_size = 1;
};

class SmallOps {
 public:
  // Bytes of shared memory for `local_size` ranks of `capacity` bytes each.
  static std::size_t area_bytes(int local_size, std::size_t capacity);

  // `area` has area_bytes(area.local_size, options.capacity) zeroed bytes that
  // every local rank maps. `world_ranks[i]` is local rank i's world rank
  // (for messages). `monitor` (may be null) tells a dead peer from a slow one
  // and blames the one behind; the caller keeps it and the area alive.
  SmallOps(const SmallOpsArea& area, int local_rank, std::vector<int> world_ranks, const SmallOpsOptions& options,
           PeerMonitor* monitor);
  ~SmallOps();
  SmallOps(const SmallOps&) = delete;
  SmallOps& operator=(const SmallOps&) = delete;

  int local_rank() const { return me_; }
  int local_size() const { return n_; }
  std::size_t capacity() const { return capacity_; }
  const SmallOpsOptions& options() const { return options_; }
  // Rounds run so far (the same on every rank).
  uint64_t rounds() const { return round_; }

  // Each op is collective over the local ranks, in the same order on all.
  // `desc` says what this rank runs (kind, dtype, op, root, count, name,
  // seq); it is compared with every peer's before data moves. `seq` names the
  // op in messages ("allreduce #12"). Throws InvalidArgument (null buffer,
  // bad root; nothing published), MismatchError (the ranks'
  // descriptors differ; usable afterwards), CommError / TimeoutError (a peer
  // died or stalled; the caller must not use this SmallOps again).

  // `name` (may be null) is the op's name, quoted in a MismatchError.

  // In place: `data` holds `count` elements; on return their reduction.
  void allreduce(void* data, std::size_t count, DataType dtype, ReduceOp op, const OpDescriptor& desc,
                 const std::string* name = nullptr);
  // `root` is a local rank; its `count` elements land in every rank's `data`.
  void broadcast(void* data, std::size_t count, DataType dtype, int root, const OpDescriptor& desc,
                 const std::string* name = nullptr);
  // recv gets local_size() blocks of `count` elements, local rank i's at i * count.
  void allgather(const void* send, std::size_t count, DataType dtype, void* recv, const OpDescriptor& desc,
                 const std::string* name = nullptr);
  // Every rank has arrived and runs the same op.
  void barrier(const OpDescriptor& desc, const std::string* name = nullptr);

  // The bare round: publishes `desc` and `bytes` of `payload` (at most
  // capacity()) and returns every local rank's record, in local rank order,
  // valid until this rank's next round. Nothing is compared. The waits run
  // under `watchdog` (the caller's, with its sleeper replaced by this rank's
  // doorbell) or, when null, as the ops' own do. Throws like the ops.
  const std::vector<SmallRecord>& exchange(const OpDescriptor& desc, const void* payload, std::size_t bytes,
                                           Watchdog* watchdog);

 private:
  struct RankState;
  struct SlotDesc;
  struct SlotHead;
  class Doorbell;
  class Waiter;

  RankState* state(int r) const;
  SlotDesc* desc_at(int r, uint64_t round) const;
  SlotHead* head(int r, uint64_t round) const;
  char* slot_data(int r, uint64_t round) const;

  // a): publishes this rank's header for round k (its `bytes` of payload
  // are already in the slot) and waits for every peer's.
  void arrive(const OpDescriptor& desc, std::size_t bytes, Waiter& wait);
  // One round of an allreduce: `count` (at most capacity() bytes) elements.
  void allreduce_round(char* data, std::size_t count, DataType dtype, ReduceOp op, const OpDescriptor& desc,
                       const std::string* name);
  // b): the descriptors of the round just run; on a difference, the names
  // round and the MismatchError.
  void check(const OpDescriptor& desc, const std::string* name, Waiter& wait);
  void ring_sleepers();
  // Names the op in messages (built only when a wait goes slow or fails).
  std::string describe(const OpDescriptor& desc) const;

  SmallOpsOptions options_;
  char* base_;
  int n_;
  int me_;
  std::size_t capacity_;
  std::size_t slot_stride_;
  std::vector<int> world_ranks_;
  PeerMonitor* monitor_;
  std::unique_ptr<Doorbell> doorbell_;
  uint64_t round_ = 0;
  std::vector<int> pending_;  // scratch for the waits (no allocation per op)
  std::vector<SmallRecord> records_;
};

}  // namespace muster::runtime::comm::shm
