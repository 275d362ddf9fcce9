// Collectives for data-parallel training: allreduce, broadcast, allgather,
// barrier over CPU buffers, between the ranks of one mpirun job.
//
// Contract
// - Every rank issues the same collectives in the same order (same count,
//   dtype, op, root). muster does not negotiate: a mismatch is a caller bug.
// - Calls may come from several threads. Each call is appended to one FIFO
//   queue and executed in submission order by the Communicator's own progress
//   thread; the synchronous forms are the asynchronous ones plus wait().
// - Buffers belong to the caller and must stay valid (and, for the in-place
//   allreduce, untouched) until the op's Handle is done.
// - Never hangs: every wait on a peer carries a watchdog deadline. A peer that
//   makes no progress for CommOptions::timeout raises TimeoutError naming it;
//   a local peer that exits raises CommError naming it; MPI errors are
//   returned (MPI_ERRORS_RETURN) and thrown as CommError. After a failure the
//   Communicator is broken: every later op rethrows the first error.
// - MPI: create() initialises it with MPI_THREAD_MULTIPLE unless the program
//   already did (then it must have asked for MULTIPLE too if other threads
//   call MPI while ops run) and finalises it at exit. Each Communicator
//   works on its own duplicate of MPI_COMM_WORLD.
// - Without mpirun (no OMPI_COMM_WORLD_* in the environment and MPI not yet
//   initialised) it is a size-1 world: allreduce/broadcast are no-ops (average
//   leaves the data unchanged), allgather is a copy, barrier returns.
//
// Algorithms. kMpi hands the buffer to MPI's own MPI_Iallreduce; float16 and
// bfloat16 use a user-defined MPI op that reduces in float. kRing is muster's
// ring allreduce (see ring_allreduce.h): reduce-scatter then allgather over a
// transport chosen per link, POSIX shared memory between ranks of one host
// (shm/), muster's own TCP streams between hosts (tcp/), or MPI
// point-to-point (mpi/) when asked for. kAuto picks kRing for buffers of at
// least ring_threshold_bytes and kMpi below.
//
// Shared buffers. allocate_shared() gives memory that every rank of a host
// maps. An allreduce on a buffer inside it (same offset on every rank) runs
// the direct algorithm when the whole job is on one host (shm/
// direct_allreduce.h): each rank reduces its chunk straight out of the
// others' buffers, with no copies through the ring's slots. Ranks on several
// hosts get ordinary memory and the ring. DistributedOptimizer keeps the
// gradients it owns in one.
//
// Usage:
//   auto comm = muster::runtime::comm::Communicator::create();
//   comm->broadcast(params.data(), params.size(), DataType::kFloat32, 0);
//   comm->allreduce(grads.data(), grads.size(), DataType::kFloat32, {ReduceOp::kAverage});
//   Handle h = comm->allreduce_async(buf, n, DataType::kFloat16);   // ... h.wait();
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "runtime/dtype.h"
#include "runtime/error.h"

namespace muster::runtime::comm {

enum class ReduceOp { kSum, kAverage, kMin, kMax };
enum class Algorithm { kAuto, kMpi, kRing };
// How the ring moves bytes between neighbours. kAuto (and kShm): shared
// memory between ranks of one host, TCP between hosts. kTcp: TCP for every
// link, also on one host. kMpi: MPI point-to-point for every link.
enum class RingTransport { kAuto, kShm, kMpi, kTcp };

const char* reduce_op_name(ReduceOp op);
const char* algorithm_name(Algorithm a);

struct AllreduceOptions {
  ReduceOp op = ReduceOp::kSum;
  Algorithm algorithm = Algorithm::kAuto;
};

struct CommOptions {
  // A peer silent this long -> TimeoutError naming it. The environment
  // variable MUSTER_COMM_TIMEOUT_MS overrides it. The ring restarts the
  // clock at every segment that moves; an MPI collective (kMpi, broadcast,
  // allgather, barrier) shows no partial progress, so there it bounds the
  // whole op: keep it well above the slowest legitimate op.
  std::chrono::milliseconds timeout{60000};
  // kAuto: ring at or above this many bytes, MPI below (bench/allreduce).
  std::size_t ring_threshold_bytes = 64 * 1024;
  // The ring's links (see RingTransport): MUSTER_COMM_RING_TRANSPORT=
  // auto|shm|tcp|mpi overrides it. kTcp and kMpi also turn the direct
  // allreduce off, so every ring byte crosses that transport.
  RingTransport ring_transport = RingTransport::kAuto;
  // TCP links (tcp/): the interfaces or subnets to use, as Open MPI's
  // btl_tcp_if_include ("eth0", "10.1.0.0/16"; MUSTER_COMM_TCP_IFACE and
  // then OMPI_MCA_btl_tcp_if_include win over it; "" = the first up,
  // non-loopback IPv4 interface, loopback when the job is on one host),
  // streams per direction (MUSTER_COMM_TCP_STREAMS; every rank must use the
  // same; 2: with I/O threads each stream's kernel work runs on a core of its
  // own, 1.2-1.6x one stream in bench/multihost), and SO_SNDBUF/SO_RCVBUF
  // (MUSTER_COMM_TCP_BUFFER_BYTES; 0 = kernel autotuning).
  std::string tcp_interface;
  int tcp_streams = 2;
  std::size_t tcp_socket_buffer_bytes = 4u << 20;
  // Who moves the TCP links' bytes (tcp/tcp_transport.h): threads of their
  // own, one per stream and direction, beside the progress thread that
  // reduces (kOn), or the progress thread itself between its reductions
  // (kOff). kAuto: threads when this process may run on at least 4 CPUs and
  // 2 per rank on its host (bench/multihost: with cores to spare they were
  // the faster way; where the ranks already share 2 cores the inline way
  // was). MUSTER_COMM_TCP_THREADS=auto|0|1 overrides it.
  enum class TcpThreads { kAuto, kOff, kOn };
  TcpThreads tcp_threads = TcpThreads::kAuto;
  // Ring pipelining: bytes per segment, and segments in flight per link
  // (MUSTER_COMM_SEGMENT_BYTES, MUSTER_COMM_SEGMENTS_IN_FLIGHT override;
  // MUSTER_COMM_RING_THRESHOLD_BYTES overrides ring_threshold_bytes).
  std::size_t segment_bytes = 256 * 1024;
  std::size_t segments_in_flight = 8;
  // The ring reduces a larger buffer block by block, this many bytes at a
  // time, so each block stays in cache between its reduce-scatter and its
  // allgather (ring_allreduce.h); 0 runs the whole buffer at once.
  // MUSTER_COMM_BLOCK_BYTES overrides it.
  std::size_t block_bytes = 1024 * 1024;
  // A rank waiting on a shared-memory neighbour (ring or direct allreduce)
  // spins this long, then sleeps on its futex doorbell (never sched_yield:
  // see watchdog.cc). kAutoSpin: 5 ms when this host's ranks have a CPU
  // each, else 50 us. A sleeping rank's idle virtual CPU is handed back to
  // the hypervisor, and waking it again cost the MLP example ~10% of its
  // throughput on this VM; spinning on a core of its own costs nothing,
  // while oversubscribed ranks must yield the core soon. MUSTER_COMM_SPIN_US
  // overrides it.
  std::chrono::microseconds spin = kAutoSpin;
  static constexpr std::chrono::microseconds kAutoSpin{-1};
};

namespace detail {
struct OpState;
}

// The completion of one asynchronous op. Move-only; wait() blocks until the
// op has run and rethrows its error (CommError, TimeoutError, ...). A Handle
// may be dropped without waiting: the op still runs.
class Handle {
 public:
  Handle();
  explicit Handle(std::shared_ptr<detail::OpState> state);
  Handle(Handle&&) noexcept;
  Handle& operator=(Handle&&) noexcept;
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
  ~Handle();

  void wait();
  bool done() const;
  bool valid() const { return state_ != nullptr; }

 private:
  std::shared_ptr<detail::OpState> state_;
};

// Memory from Communicator::allocate_shared: zeroed, 64-byte aligned, valid
// until destroyed (after the last op on it is done).
class SharedBuffer {
 public:
  virtual ~SharedBuffer() = default;
  virtual void* data() = 0;
  virtual std::size_t bytes() const = 0;
  // True when the other ranks map it: allreduces in it run direct.
  virtual bool direct() const = 0;
};

// Ordinary memory behind the SharedBuffer interface (direct() false).
std::unique_ptr<SharedBuffer> make_private_buffer(std::size_t bytes);

class Communicator {
 public:
  // Calls MPI_Init_thread if MPI is not initialised (and we run under
  // mpirun), duplicates MPI_COMM_WORLD, sets MPI_ERRORS_RETURN on it, maps
  // the shared-memory segment of this host and starts the progress thread.
  // Collective: every rank calls it.
  static std::unique_ptr<Communicator> create(const CommOptions& options = {});
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual int local_rank() const = 0;
  virtual int local_size() const = 0;
  // The options in force (after environment overrides).
  virtual const CommOptions& options() const = 0;

  // In place: `data` holds `count` elements on entry and the reduction of
  // all ranks' buffers on return.
  void allreduce(void* data, std::size_t count, DataType dtype, const AllreduceOptions& options = {});
  virtual Handle allreduce_async(void* data, std::size_t count, DataType dtype,
                                 const AllreduceOptions& options = {}) = 0;

  // Root's `count` elements are copied into every rank's `data`.
  void broadcast(void* data, std::size_t count, DataType dtype, int root);
  virtual Handle broadcast_async(void* data, std::size_t count, DataType dtype, int root) = 0;

  // Every rank contributes `count` elements; `recv` receives size()*count,
  // rank i's block at i*count.
  void allgather(const void* send, std::size_t count, DataType dtype, void* recv);
  virtual Handle allgather_async(const void* send, std::size_t count, DataType dtype, void* recv) = 0;

  // Like allgather with per-rank counts: *counts is resized to size() and
  // filled with each rank's count, *recv to the concatenation in rank order
  // (bytes, sum(counts) * dtype_size(dtype)).
  virtual void allgatherv(const void* send, std::size_t count, DataType dtype, std::vector<char>* recv,
                          std::vector<std::size_t>* counts) = 0;

  void barrier();
  virtual Handle barrier_async() = 0;

  // Collective: every rank calls it, in the same order relative to its other
  // collectives, with the same `bytes`. See "Shared buffers" above.
  virtual std::unique_ptr<SharedBuffer> allocate_shared(std::size_t bytes) = 0;
};

}  // namespace muster::runtime::comm
