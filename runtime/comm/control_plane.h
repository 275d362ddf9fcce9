// The descriptor exchange every op starts with: each rank's record (its
// OpDescriptor and a payload of any size) reaches every other rank, in one
// round, over muster's own links. It is how ranks compare what they asked
// for before any data moves (op_descriptor.h), how small ops move their
// data (the payload: no second round), and how alltoall learns its counts.
//
// Peers on this host (sharing the ShmSegment, unless RingTransport::kTcp)
// use the segment's control table: each rank has two slots and writes the
// exchange numbered x into slot x % 2 (header, payload, then the sequence
// word with release), rings its local peers' doorbells, and reads each
// peer's slot x % 2 once its sequence word says x. A rank reaches exchange
// x + 2, and so overwrites that slot, only after every peer has published
// x + 1, which each does only after reading x: two slots are enough, and a
// peer's payload can be read in place until this rank's next exchange.
// Peers on other hosts get the record over the mesh's TCP stream to each:
// a 64-byte header frame, then the payload as one frame.
//
// On a world whose ranks all share one host the exchange is a SmallOps
// round instead (shm/small_ops.h: the same two-slot protocol in its own
// area, whose waits spin before they sleep), so the small ops that run
// straight on SmallOps and every other op's exchange count the same rounds.
//
// Every wait runs under the op's Watchdog: a peer that does not publish is
// named after the timeout (the lowest rank still missing), one whose
// process exits or whose stream closes at once.
//
// Threads: the progress thread only.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "runtime/comm/op_descriptor.h"
#include "runtime/comm/shm/shm_segment.h"
#include "runtime/comm/shm/small_ops.h"
#include "runtime/comm/tcp/mesh_stream.h"
#include "runtime/comm/watchdog.h"

namespace muster::runtime::comm {

// The head of every record, in the control table and on the wire.
struct RecordHeader {
  OpDescriptor desc;
  uint64_t payload_bytes = 0;
  uint64_t xseq = 0;  // the exchange's number on this communicator, from 1
};
static_assert(sizeof(RecordHeader) == 64, "a record header is one cache line");

class ControlPlane {
 public:
  // `table_local[r]`: rank r's local rank in `segment` when r is read
  // through the control table, else -1; `mesh[r]`: the TCP stream to rank r
  // otherwise. Exactly one of the two for every rank but this one. Not owned.
  // `spin`: how long a rank waiting on the control table spins before it
  // sleeps on its doorbell.
  // `small` (not owned; may be null): every rank is on this host and the
  // exchanges run as its rounds.
  ControlPlane(int rank, int size, shm::ShmSegment* segment, std::vector<int> table_local,
               std::vector<tcp::MeshStream*> mesh, std::chrono::microseconds spin, shm::SmallOps* small = nullptr);
  ControlPlane(const ControlPlane&) = delete;
  ControlPlane& operator=(const ControlPlane&) = delete;

  // What one rank sent: its header, and its payload (valid until the next
  // exchange; for this rank, the caller's own memory).
  struct Record {
    RecordHeader header;
    const char* payload = nullptr;
  };

  // Collective. Sends `desc` and `payload` (`bytes`; at most
  // payload_capacity() through the control table) to every rank and returns
  // every rank's record, in rank order.
  const std::vector<Record>& exchange(const OpDescriptor& desc, const void* payload, std::size_t bytes,
                                      Watchdog& watchdog);
  // The largest payload an exchange may carry.
  std::size_t payload_capacity() const;

 private:
  bool all_table() const;
  bool all_mesh() const;

  int rank_;
  int size_;
  shm::ShmSegment* segment_;
  std::vector<int> table_local_;
  std::vector<tcp::MeshStream*> mesh_;
  int my_local_ = -1;
  uint64_t xseq_ = 0;
  RecordHeader out_header_;                  // what the mesh streams send from
  std::vector<Record> records_;
  std::vector<std::vector<char>> received_;  // mesh peers' payloads, by rank
  std::unique_ptr<Sleeper> sleeper_;         // how a waiting rank sleeps (null: back off)
  std::chrono::microseconds spin_;
  shm::SmallOps* small_ = nullptr;
};

}  // namespace muster::runtime::comm
