// The Communicator over a Bootstrap (see communicator.h for the contract).
//
// Files: world_formation.cc forms the world (host map, shared-memory
// segment, TCP ring and mesh, control plane); world_communicator.cc queues
// ops, checks their descriptors and picks the path each runs; world_ops.cc
// holds the ops' bodies; world_small.cc the small paths: an op whose data
// came inline with its descriptors (run_small), and the path of a world
// whose ranks all share one host (shm/small_ops.h), which skips the Call.
//
// Ownership: it owns the Bootstrap (kept for split()), this host's
// ShmSegment and peer monitor, the ring's two links and the TCP streams
// under them, the mesh (a link to every peer: shm channels on this host,
// TCP streams to others), the control plane, and the progress thread, which
// alone touches the links after construction; and the point-to-point engine
// (point_to_point.h), with rings, streams and a thread of its own. Ops are closures queued on
// the progress thread; each gets a sequence number (the same on every rank)
// and a Watchdog. The first CommError breaks the Communicator: later ops
// rethrow it at once instead of talking to peers in an unknown state. A
// MismatchError does not: it is thrown before any of the op's data moves.
#pragma once

#include <mpi.h>

#include <atomic>
#include <cstdint>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "runtime/comm/alltoall.h"
#include "runtime/comm/communicator.h"
#include "runtime/comm/control_plane.h"
#include "runtime/comm/host_map.h"
#include "runtime/comm/link.h"
#include "runtime/comm/point_to_point.h"
#include "runtime/comm/progress_thread.h"
#include "runtime/comm/ring_collectives.h"
#include "runtime/comm/shm/shared_region.h"
#include "runtime/comm/shm/shm_link.h"
#include "runtime/comm/shm/shm_peer_monitor.h"
#include "runtime/comm/shm/shm_segment.h"
#include "runtime/comm/shm/small_ops.h"
#include "runtime/comm/tcp/tcp_formation.h"
#include "runtime/comm/watchdog.h"

namespace muster::runtime::comm {

class WorldCommunicator : public Communicator {
 public:
  WorldCommunicator(std::unique_ptr<Bootstrap> bootstrap, const CommOptions& options);
  ~WorldCommunicator() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  int local_rank() const override { return local_rank_; }
  int local_size() const override { return local_size_; }
  const CommOptions& options() const override { return options_; }
  std::string bootstrap_kind() const override { return bootstrap_kind_; }
  std::string transport() const override { return ring_transport_name(); }

  Handle allreduce_async(void* data, std::size_t count, DataType dtype, const AllreduceOptions& options) override;
  Handle broadcast_async(void* data, std::size_t count, DataType dtype, int root, const OpOptions& options) override;
  Handle allgather_async(const void* send, std::size_t count, DataType dtype, void* recv,
                         const OpOptions& options) override;
  Handle allgatherv_async(const void* send, std::size_t count, DataType dtype, std::vector<char>* recv,
                          std::vector<std::size_t>* counts, const OpOptions& options) override;
  Handle reducescatter_async(const void* send, void* recv, const std::vector<std::size_t>& counts, DataType dtype,
                             const ReduceScatterOptions& options) override;
  Handle alltoall_async(const void* send, const std::vector<std::size_t>& send_counts, DataType dtype,
                        std::vector<char>* recv, std::vector<std::size_t>* recv_counts,
                        const OpOptions& options) override;
  Handle alltoallv_async(const void* send, const std::vector<std::size_t>& send_counts, void* recv,
                         const std::vector<std::size_t>& recv_counts, DataType dtype,
                         const OpOptions& options) override;
  Handle barrier_async(const OpOptions& options) override;
  Handle send_async(const void* data, std::size_t bytes, int dst, const P2pOptions& options) override;
  Handle recv_async(void* data, std::size_t bytes, int src, const P2pOptions& options, int* source) override;
  // world_small.cc: without a Handle where the small path takes the op.
  void allreduce(void* data, std::size_t count, DataType dtype, const AllreduceOptions& options) override;
  void broadcast(void* data, std::size_t count, DataType dtype, int root, const OpOptions& options) override;
  void allgather(const void* send, std::size_t count, DataType dtype, void* recv, const OpOptions& options) override;
  void barrier(const OpOptions& options) override;
  void check_peers() override;
  std::unique_ptr<Communicator> split(const std::vector<int>& ranks, const std::string& name) override;
  std::unique_ptr<SharedBuffer> allocate_shared(std::size_t bytes) override;
  bool shares_host_memory() const override { return direct_capable_; }
  void forget_shared_file(uint64_t device, uint64_t inode) override;

  // Which transport the ring links use ("shm", "tcp", "mpi", "mixed" when
  // they differ, or "none"), for tests and logs.
  std::string ring_transport_name() const;
  // Whether this rank's TCP ring links move their bytes on I/O threads.
  bool tcp_io_threads() const;
  // The ring's block where every link is TCP (world_ops.cc), unless
  // MUSTER_COMM_BLOCK_BYTES sets one; the same on every rank.
  std::size_t tcp_ring_block_bytes() const;
  // Inline all-TCP rings: the agreed round trip that block follows, in
  // microseconds (0: unknown, or not such a ring).
  uint32_t tcp_ring_round_trip_us() const { return ring_round_trip_us_; }

 private:
  // What a call says about itself, built on the caller's thread.
  struct Call {
    OpDescriptor desc;       // seq filled in when it runs
    std::string name;
    std::string invalid;     // non-empty: this rank's arguments were refused, and why
    std::string what;        // "allreduce(4096 x float32, sum)" for errors
  };
  using Body = std::function<void(Watchdog&)>;

  // world_formation.cc (with ring_peers())
  void form();
  void form_segment(const std::string& key_of_host, int host_size);
  void form_links(bool io_threads);
  void form_p2p(const std::function<bool(int, int)>& shm_between);

  // Queues `body` under the sequence number, watchdog and broken-state rules.
  Handle submit(Call call, std::function<void(Call&, Watchdog&)> body);
  // The descriptor exchange with `payload`, then the comparison: throws
  // InvalidArgument on a rank whose own arguments were refused, and the same
  // MismatchError on every other rank when descriptors differ.
  const std::vector<ControlPlane::Record>& checked_exchange(Call& call, const void* payload, std::size_t bytes,
                                                            Watchdog& watchdog);
  // Where a small op (its data within options().inline_bytes) runs: its
  // data came with the descriptors, so the op finishes from the records.
  // The small-message engine plugs in here (world_small.cc).
  void run_small(const Call& call, const std::vector<ControlPlane::Record>& records, void* data, void* recv);
  bool inline_fits(std::size_t bytes) const;

  // world_small.cc. On a world whose ranks all share this host, SmallOps is
  // the control plane, and allreduce, broadcast, allgather and barrier whose
  // data fits the small path (small_fits), with valid arguments, run as one
  // SmallOps op each: queued as a bare closure (no Call, no strings), run
  // by the caller when it waits at once (progress_thread.h), with no
  // Watchdog unless a wait outlasts the spin. An op larger than a slot runs
  // there in pieces; where the host's ranks outnumber its CPUs, or there are
  // just 2 (pieces_over_ring_), so does every allreduce of the caller's own
  // memory past small_fits, after its descriptor exchange, in place of the
  // ring.
  void form_small(int host_size);
  std::size_t small_capacity(int host_size) const;
  bool small_fits(std::size_t bytes) const { return small_ && bytes <= small_limit_; }
  Handle allreduce_small(void* data, std::size_t count, DataType dtype, const AllreduceOptions& options);
  Handle broadcast_small(void* data, std::size_t count, DataType dtype, int root, const OpOptions& options);
  Handle allgather_small(const void* send, std::size_t count, DataType dtype, void* recv, const OpOptions& options);
  Handle barrier_small(const OpOptions& options);
  // Whether an op goes this way; its descriptor, built from the arguments.
  bool allreduce_small_fits(void* data, std::size_t count, DataType dtype, const AllreduceOptions& options) const;
  bool broadcast_small_fits(void* data, std::size_t count, DataType dtype, int root) const;
  bool allgather_small_fits(const void* send, std::size_t count, DataType dtype, void* recv) const;
  static OpDescriptor small_descriptor(OpKind kind, DataType dtype, std::size_t count, const std::string& name,
                                       const std::vector<int64_t>& shape);
  // Runs one small op under the sequence number and broken-state rules.
  template <typename F>
  void run_lean(OpDescriptor& desc, const char* what, F&& body);
  // After a CommError (or any failure mid-op): the Communicator is broken
  // and the peers learn whom to blame.
  void break_links(int blamed);

  // world_ops.cc: the data paths.
  void allreduce_ring(void* data, std::size_t count, DataType dtype, ReduceOp op, Watchdog& watchdog);
  void allreduce_mpi(void* data, std::size_t count, DataType dtype, ReduceOp op, Watchdog& watchdog);
  void allreduce_direct(const shm::RegionTable::Found& found, std::size_t count, DataType dtype, ReduceOp op,
                        Watchdog& watchdog);
  // The callers' shared files this rank maps (AllreduceOptions::shared_fd):
  // the one `file` names, if mapped; else adopts it with the other ranks
  // (collective: every rank offered a file for this op), null if that failed.
  struct Adopted {
    uint64_t id = 0;  // the region id the descriptors carry
    std::shared_ptr<shm::SharedRegion> region;
  };
  Adopted find_adopted(const shm::SharedRegion::File& file);
  Adopted adopt_file(const shm::SharedRegion::File& file, std::size_t need, Watchdog& watchdog);
  RingPeers ring_peers() const;
  // Host-wide allgather over the control plane (SharedRegion::create).
  std::vector<std::string> host_allgather(const std::string& mine, Watchdog& watchdog);

  CommOptions options_;
  std::unique_ptr<Bootstrap> bootstrap_;
  std::string bootstrap_kind_;
  MPI_Comm mpi_comm_ = MPI_COMM_NULL;  // the MPI Bootstrap's, for the kMpi opt-ins
  int rank_ = 0;
  int size_ = 1;
  int local_rank_ = 0;
  int local_size_ = 1;
  HostMap hosts_;
  std::unique_ptr<shm::ShmSegment> segment_;  // this host's, when it has several ranks
  int shm_local_ = -1;                        // this rank's index in the segment
  std::vector<bool> host_has_segment_;        // by host index: every rank of it mapped its segment
  std::unique_ptr<shm::ShmPeerMonitor> monitor_;
  std::unique_ptr<shm::DoorbellSleeper> sleeper_;
  tcp::TcpLinks tcp_;                          // the ring's TCP transport and the mesh's streams
  std::unique_ptr<SendLink> send_link_;        // the ring
  std::unique_ptr<RecvLink> recv_link_;
  std::vector<std::unique_ptr<SendLink>> mesh_send_;  // shm mesh channels, by rank
  std::vector<std::unique_ptr<RecvLink>> mesh_recv_;
  std::vector<PeerLink> peer_links_;           // alltoall's link to every rank
  std::unique_ptr<shm::SmallOps> small_;  // in segment_; before control_, which may use it
  std::size_t small_limit_ = 0;           // bytes per rank an op may have to run on small_
  bool pieces_over_ring_ = false;         // larger private allreduces, too (see above)
  std::unique_ptr<ControlPlane> control_;
  std::unique_ptr<PointToPoint> p2p_;  // send/recv: links of their own, a thread of its own
  bool ring_all_shm_ = false;  // both ring links in shm: sleep on the doorbell
  bool ring_all_tcp_ = false;  // both ring links TCP: sleep in ppoll on the streams
  // Every rank's links TCP (same on all ranks); with tcp_io_threads(), which
  // every rank agreed on, 16 MB blocks.
  bool tcp_ring_everywhere_ = false;
  bool block_from_env_ = false;  // MUSTER_COMM_BLOCK_BYTES set: keep it on TCP rings too
  // Inline all-TCP rings: the largest round trip any rank's link to its right
  // neighbour had at formation, in microseconds (0: unknown); agreed.
  uint32_t ring_round_trip_us_ = 0;
  bool direct_capable_ = false;  // the whole job on this host, with a segment
  // The shared buffers alive, shared with them (they deregister on destruction).
  std::shared_ptr<shm::RegionTable> regions_ = std::make_shared<shm::RegionTable>();
  uint64_t next_region_id_ = 0;        // progress thread only
  // Adopted files by (device, inode); forget_shared_file() drops one from any thread.
  std::mutex adopted_mu_;
  std::map<std::pair<uint64_t, uint64_t>, Adopted> adopted_;
  bool adoption_off_ = false;  // progress thread only: a rank could not map a peer's file
  uint64_t seq_ = 0;                   // progress thread only
  std::exception_ptr broken_;          // progress thread only
  std::vector<char> scratch_;          // progress thread only (the small path)
  std::atomic<bool> closing_{false};   // the destructor ends an op in flight
  std::mutex split_mu_;                // one split at a time uses the Bootstrap
  std::unique_ptr<ProgressThread> progress_;  // last: stopped first
};

}  // namespace muster::runtime::comm
