// The Communicator over MPI_COMM_WORLD (see communicator.h for the contract).
//
// Ownership: it owns a duplicate of MPI_COMM_WORLD (errors returned, not
// fatal), the host communicator, the host's ShmSegment and peer monitor, the
// two ring links (and the TCP streams under them), and the progress thread,
// which alone touches all of these after construction. Ops are closures queued on the progress thread; each
// one gets a sequence number (the same on every rank) and a Watchdog. The
// first CommError breaks the Communicator: later ops rethrow it at once
// instead of talking to peers in an unknown state.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "runtime/comm/communicator.h"
#include "runtime/comm/link.h"
#include "runtime/comm/progress_thread.h"
#include "runtime/comm/shm/shared_region.h"
#include "runtime/comm/shm/shm_link.h"
#include "runtime/comm/shm/shm_peer_monitor.h"
#include "runtime/comm/shm/shm_segment.h"
#include "runtime/comm/tcp/tcp_transport.h"
#include "runtime/comm/watchdog.h"

namespace muster::runtime::comm {

class WorldCommunicator : public Communicator {
 public:
  explicit WorldCommunicator(const CommOptions& options);
  ~WorldCommunicator() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  int local_rank() const override { return local_rank_; }
  int local_size() const override { return local_size_; }
  const CommOptions& options() const override { return options_; }

  Handle allreduce_async(void* data, std::size_t count, DataType dtype, const AllreduceOptions& options) override;
  Handle broadcast_async(void* data, std::size_t count, DataType dtype, int root) override;
  Handle allgather_async(const void* send, std::size_t count, DataType dtype, void* recv) override;
  void allgatherv(const void* send, std::size_t count, DataType dtype, std::vector<char>* recv,
                  std::vector<std::size_t>* counts) override;
  Handle barrier_async() override;
  std::unique_ptr<SharedBuffer> allocate_shared(std::size_t bytes) override;

  // Which transport the ring links use ("shm", "tcp", "mpi", "mixed" when
  // they differ, or "none"), for tests and logs.
  std::string ring_transport_name() const;
  // Whether this rank's TCP links move their bytes on I/O threads.
  bool tcp_io_threads() const;

 private:
  using Op = std::function<void(Watchdog&)>;
  // Queues `op` under the sequence number, watchdog and broken-state rules.
  Handle submit(std::string what, Op op);
  void init_mpi();
  void init_links();
  // Polls an MPI request under the watchdog (a collective: no single peer).
  void wait_request(MPI_Request* request, Watchdog& watchdog, const char* what);
  void allreduce_mpi(void* data, std::size_t count, DataType dtype, ReduceOp op, Watchdog& watchdog);
  void allreduce_ring(void* data, std::size_t count, DataType dtype, ReduceOp op, Watchdog& watchdog);
  // The direct allreduce when [data, data + bytes) lies in a shared buffer
  // of this rank (true), else false after telling the peers this op is not
  // one (when shared buffers exist at all).
  // `allowed` false (MPI's algorithm asked for): never direct.
  bool try_allreduce_direct(void* data, std::size_t count, DataType dtype, ReduceOp op, bool allowed,
                            Watchdog& watchdog);

  CommOptions options_;
  bool with_mpi_ = false;
  int rank_ = 0;
  int size_ = 1;
  int local_rank_ = 0;
  int local_size_ = 1;
  MPI_Comm comm_ = MPI_COMM_NULL;
  MPI_Comm local_comm_ = MPI_COMM_NULL;
  std::vector<int> host_of_;   // world rank -> leader world rank of its host
  std::vector<int> local_of_;  // world rank -> rank in its host communicator
  int shm_local_rank_ = 0;     // this rank in local_comm_ (indexes the segment)
  std::unique_ptr<shm::ShmSegment> segment_;
  std::unique_ptr<shm::ShmPeerMonitor> monitor_;
  std::unique_ptr<shm::DoorbellSleeper> sleeper_;
  std::unique_ptr<tcp::TcpTransport> tcp_;  // the links' TCP streams, if any
  std::unique_ptr<SendLink> send_link_;
  std::unique_ptr<RecvLink> recv_link_;
  bool ring_all_shm_ = false;  // both ring links in shm: sleep on the doorbell
  bool ring_all_tcp_ = false;  // both ring links TCP: sleep in ppoll on the streams
  // Every rank's links TCP (same on all ranks); with tcp_io_threads(), which
  // every rank agreed on, 16 MB blocks.
  bool tcp_ring_everywhere_ = false;
  bool block_from_env_ = false;  // MUSTER_COMM_BLOCK_BYTES set: keep it on TCP rings too
  bool direct_capable_ = false;  // the whole job on this host, with a segment
  // The shared buffers alive, shared with them (they deregister on destruction).
  std::shared_ptr<shm::RegionTable> regions_ = std::make_shared<shm::RegionTable>();
  uint64_t next_region_id_ = 0;     // progress thread only
  uint64_t direct_blocks_ = 0;      // progress thread only (direct_allreduce)
  uint64_t seq_ = 0;                   // progress thread only
  std::exception_ptr broken_;          // progress thread only
  std::unique_ptr<ProgressThread> progress_;  // last: stopped first
};

}  // namespace muster::runtime::comm
