// Collectives for data-parallel training over CPU buffers: allreduce,
// broadcast, allgather(v), reduce-scatter, alltoall(v), barrier, between the
// ranks of one world, and process sets (split) within it.
//
// Formation. A Communicator is built over a Bootstrap (bootstrap.h): MPI's
// world under mpirun, a KvStore that every rank reaches (musterd's
// rendezvous, a torch.distributed Store, a file or in-process store), or the
// world of one. The Bootstrap only carries the few bytes formation swaps
// (host map, shared-memory segment names, TCP endpoints, agreements); every
// op then runs over muster's own links: POSIX shared memory between ranks of
// one host (shm/), muster's TCP streams between hosts (tcp/). No op calls
// MPI unless asked to (Algorithm::kMpi, RingTransport::kMpi: opt-ins for
// benchmarks, only under an MPI Bootstrap).
//
// Contract
// - Every rank issues the same collectives in the same order. Before an op's
//   data moves the ranks compare what each asked for (OpDescriptor: kind,
//   dtype, count or shape, reduce op, root, name; op_descriptor.h). Where
//   they differ every rank's op throws the same MismatchError naming the
//   ranks and the fields that differ, and the Communicator stays usable: no
//   byte of that op has moved and the next op runs normally.
// - Calls may come from several threads. Each call is appended to one FIFO
//   queue and executed in submission order by the Communicator's own progress
//   thread; the synchronous forms are the asynchronous ones plus wait().
// - Buffers (and the vectors an op fills) belong to the caller and must stay
//   valid (and, for in-place ops, untouched) until the op's Handle is done.
// - Never hangs: every wait on a peer carries a watchdog deadline. A peer that
//   makes no progress for CommOptions::timeout raises TimeoutError naming it;
//   a peer that exits raises CommError naming it (a local one within ~50 ms,
//   a remote one as soon as its TCP streams close). After such a failure the
//   Communicator is broken: every later op rethrows the first error. A
//   broken Communicator is destroyed promptly and leaves nothing behind
//   (shared-memory objects, sockets, threads); a new one may then be created
//   in the same process over a new Bootstrap (a KvStore with a new prefix:
//   MPI cannot be re-initialised).
// - Destroying a Communicator ends an op in flight with CommError (the peers
//   see this rank leave) and joins its threads.
//
// Which op runs how (runtime/comm/README.md has the details and figures):
// - Every op starts with the ranks' exchange of descriptors (control_plane.h):
//   one round over shared memory on one host, over the TCP mesh between
//   hosts. Ops small enough (CommOptions::inline_bytes) carry their data in
//   that same exchange and are done after it (the "small" path).
// - allreduce: the direct algorithm when the buffer lies at the same place
//   in a shared buffer on every rank and the whole world is on one host
//   (shm/direct_allreduce.h); else muster's ring (ring_allreduce.h):
//   reduce-scatter then allgather over a SendLink to the right neighbour and
//   a RecvLink from the left one (shm on a host, TCP between hosts).
// - broadcast: pipelined along the ring from the root. allgather(v): the
//   ring's allgather. reduce-scatter: the ring's reduce-scatter, each rank
//   ending with its own block. alltoall(v): point to point, every pair of
//   ranks through its own shared-memory channel (one host) or TCP stream.
//   barrier: the exchange itself.
//
// Shared buffers. allocate_shared() gives memory that every rank of a host
// maps. An allreduce on a buffer inside it (same offset on every rank) runs
// the direct algorithm when the whole job is on one host: each rank reduces
// its chunk straight out of the others' buffers, with no copies through the
// ring's slots. Ranks on several hosts get ordinary memory and the ring.
// DistributedOptimizer keeps the gradients it owns in one. A caller whose
// buffer already lies in a shared-memory file of its own (torch's
// share_memory_() storages: DDP's buckets on the "muster" backend) names the
// file in AllreduceOptions::shared_fd; the ranks then map each other's files
// once and those allreduces run direct too.
//
// Usage:
//   auto comm = muster::runtime::comm::Communicator::create();   // from the environment
//   comm->broadcast(params.data(), params.size(), DataType::kFloat32, 0);
//   comm->allreduce(grads.data(), grads.size(), DataType::kFloat32, {ReduceOp::kAverage});
//   Handle h = comm->allreduce_async(buf, n, DataType::kFloat16);   // ... h.wait();
//   // A world over a store every rank reaches (no mpirun):
//   auto store = make_file_kv_store("/shared/dir");
//   auto world = Communicator::create(std::make_unique<KvBootstrap>(store, rank, size, "job-7"));
//   auto evens = world->split({0, 2}, "evens");   // null on ranks 1 and 3
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "runtime/comm/bootstrap.h"
#include "runtime/dtype.h"
#include "runtime/error.h"

namespace muster::runtime::comm {

enum class ReduceOp { kSum, kAverage, kMin, kMax };
// kAuto: muster's own paths (small, direct, ring). kRing: the ring (or, in
// a shared buffer, the direct path) even where the small path would run. kMpi: MPI_Iallreduce on the MPI
// Bootstrap's communicator (benchmarks and comparison; InvalidArgument
// without an MPI Bootstrap). kAuto never picks kMpi.
enum class Algorithm { kAuto, kMpi, kRing };
// How the ring moves bytes between neighbours. kAuto (and kShm): shared
// memory between ranks of one host, TCP between hosts. kTcp: TCP for every
// link (ring and mesh), also on one host. kMpi: MPI point-to-point for the
// ring's links (only under an MPI Bootstrap; the rest as kAuto).
enum class RingTransport { kAuto, kShm, kMpi, kTcp };

const char* reduce_op_name(ReduceOp op);
const char* algorithm_name(Algorithm a);

// What every op may carry besides its buffers.
//   name:  compared across ranks and quoted in errors ("" = unnamed; every
//          rank must then leave it empty);
//   shape: the caller's shape, compared across ranks where the kind says so
//          (allreduce, broadcast: the whole shape; allgather(v), alltoall:
//          the dimensions after the first); empty = only counts compared.
// (The "= {}" keep aggregate initialisers such as {ReduceOp::kSum} free
// of missing-initializer warnings.)
struct OpOptions {
  std::string name = {};
  std::vector<int64_t> shape = {};
};

struct AllreduceOptions {
  ReduceOp op = ReduceOp::kSum;
  Algorithm algorithm = Algorithm::kAuto;
  std::string name = {};
  std::vector<int64_t> shape = {};
  // The buffer lies in a shared-memory file this rank holds open as
  // `shared_fd`, `shared_offset` bytes from its start (torch's
  // share_memory_() storages). When every rank of a one-host world says so,
  // with the same offset, the ranks map each other's files (once per file)
  // and the op runs direct, as in an allocate_shared() buffer. The fd must
  // stay open until the op is done; forget_shared_file() drops the mapping.
  int shared_fd = -1;
  std::size_t shared_offset = 0;
};

struct ReduceScatterOptions {
  ReduceOp op = ReduceOp::kSum;
  std::string name = {};
  std::vector<int64_t> shape = {};
};

// A point-to-point op's options (send_async / recv_async).
//   tag:     messages match by (sender, tag); any value (torch's tags are
//            ints; callers may keep a range of their own beyond them);
//   timeout: how long the op may wait without a byte moving (a recv: for a
//            message to arrive) before it fails with TimeoutError and is
//            withdrawn; 0 = CommOptions::timeout.
struct P2pOptions {
  int64_t tag = 0;
  std::chrono::milliseconds timeout{0};
};

struct CommOptions {
  // A peer silent this long -> TimeoutError naming it. The environment
  // variable MUSTER_COMM_TIMEOUT_MS overrides it. muster's own paths restart
  // the clock at every segment that moves; an MPI collective (kMpi) shows no
  // partial progress, so there it bounds the whole op.
  std::chrono::milliseconds timeout{60000};
  // How long forming the world (create, split) waits for every rank to
  // arrive: processes start at different times, so this is separate from
  // the ops' timeout. 0: the larger of `timeout` and 60 s.
  // MUSTER_COMM_FORMATION_TIMEOUT_MS overrides it.
  std::chrono::milliseconds formation_timeout{0};
  // Ops whose data is at most this many bytes per rank travel inside the
  // descriptor exchange (the small path); 0 turns it off.
  // MUSTER_COMM_INLINE_BYTES overrides it.
  std::size_t inline_bytes = 4096;
  // On a world whose ranks all share one host, allreduce, broadcast,
  // allgather and barrier with at most this many bytes per rank run through
  // the small-message engine (shm/small_ops.h: one shared block, one round
  // per op, the descriptors compared in the same round); larger ones take
  // the ring, or, where the host's ranks outnumber its CPUs or there are
  // just 2, the engine again after a descriptor exchange (unless the
  // buffer is shared: then the direct path). Every rank must use the same; 0 turns the engine off
  // (ops then exchange descriptors through the control table). The engine's
  // area is 2 slots per rank of this size or 256 KB, whichever is less
  // (capped at 32 MB per host); an op larger than a slot runs in pieces of
  // it. MUSTER_COMM_SMALL_BYTES overrides it.
  // kAutoSmallBytes (the default): auto_small_bytes() below, from the host's
  // ranks and CPUs.
  static constexpr std::size_t kAutoSmallBytes = ~std::size_t{0};
  std::size_t small_bytes = kAutoSmallBytes;
  // Whether ranks compare OpDescriptors before an op's data moves. Only for
  // measuring what the check costs (bench/allreduce): without it, ops that
  // differ between ranks give undefined results. MUSTER_COMM_CHECK_OPS=0|1.
  bool check_ops = true;
  // The ring's links (see RingTransport): MUSTER_COMM_RING_TRANSPORT=
  // auto|shm|tcp|mpi overrides it. kTcp and kMpi also turn the direct
  // allreduce off, so every ring byte crosses that transport.
  RingTransport ring_transport = RingTransport::kAuto;
  // TCP links (tcp/): the interfaces or subnets to use, as Open MPI's
  // btl_tcp_if_include ("eth0", "10.1.0.0/16"; MUSTER_COMM_TCP_IFACE and
  // then OMPI_MCA_btl_tcp_if_include win over it; "" = the first up,
  // non-loopback IPv4 interface, loopback when the job is on one host),
  // streams per direction on the ring (MUSTER_COMM_TCP_STREAMS=auto|1..64;
  // every rank must use the same), and SO_SNDBUF/SO_RCVBUF
  // (MUSTER_COMM_TCP_BUFFER_BYTES; 0 = kernel autotuning).
  // kAutoTcpStreams (the default): 2 where the ring runs I/O threads (each
  // stream's kernel work on a core of its own: 1.2-1.6x one stream in
  // bench/multihost, 16 cores), else 1: there the progress thread moves
  // every byte, a second stream gained nothing, and on a rate-limited link
  // two streams lose to one (the ring takes segments in order, so the
  // stream that gets less of the link paces both: bench/multihost's shaped
  // links, runtime/comm/README.md "On a shaped link"). Resolved at formation
  // from the agreed thread choice, so every rank resolves it alike.
  static constexpr int kAutoTcpStreams = 0;
  std::string tcp_interface;
  int tcp_streams = kAutoTcpStreams;
  std::size_t tcp_socket_buffer_bytes = 4u << 20;
  // Who moves the TCP ring links' bytes (tcp/tcp_transport.h): threads of
  // their own, one per stream and direction, beside the progress thread that
  // reduces (kOn), or the progress thread itself between its reductions
  // (kOff). kAuto: threads when every rank may run on at least 4 CPUs and
  // 2 per rank on its host. MUSTER_COMM_TCP_THREADS=auto|0|1 overrides it.
  enum class TcpThreads { kAuto, kOff, kOn };
  TcpThreads tcp_threads = TcpThreads::kAuto;
  // Ring pipelining: bytes per segment, and segments in flight per link
  // (MUSTER_COMM_SEGMENT_BYTES, MUSTER_COMM_SEGMENTS_IN_FLIGHT override).
  std::size_t segment_bytes = 256 * 1024;
  std::size_t segments_in_flight = 8;
  // The ring reduces a larger buffer block by block, this many bytes at a
  // time, so each block stays in cache between its reduce-scatter and its
  // allgather (ring_allreduce.h); 0 runs the whole buffer at once. A ring
  // whose every link is TCP picks its own (16 MB with I/O threads, else
  // from the links' round trip: tcp_inline_block_bytes).
  // MUSTER_COMM_BLOCK_BYTES overrides both.
  std::size_t block_bytes = 1024 * 1024;
  // A rank waiting on a shared-memory neighbour spins this long, then sleeps
  // on its futex doorbell (never sched_yield: see watchdog.cc). kAutoSpin:
  // 5 ms when this host's ranks have a CPU each, else 0 (sleep at once).
  // MUSTER_COMM_SPIN_US overrides it.
  std::chrono::microseconds spin = kAutoSpin;
  static constexpr std::chrono::microseconds kAutoSpin{-1};
  // Point to point between ranks of one host: a send of 32 MB or more only
  // names its buffer, and the receiver reads it straight from the sender's
  // memory (process_vm_readv; the sender writes half into the recv's buffer
  // when it is posted), where the kernel lets them; else, and with this
  // off, every byte goes through the pair's shared-memory ring.
  // MUSTER_COMM_P2P_SINGLE_COPY=0|1 overrides it.
  bool p2p_single_copy = true;
  // Which ranks share a host, and with it shared memory and loopback: ranks
  // whose keys are equal. "" = this machine's (hostname, boot, network
  // namespace, /dev/shm: host_map.h). Tests give ranks on threads keys of
  // their own to stand in for hosts.
  std::string host_key;
};

// The small path's limit when CommOptions::small_bytes is kAutoSmallBytes:
// 256 KB; 4 MB where a host's ranks outnumber its CPUs. Then the ring's
// pipeline waits for a descheduled neighbour at every step, while the small
// path's two waits per 256 KB piece do not care (4 ranks on 2 cores, 1 MB:
// ring 3.8-4.3 GB/s, small path 8.5-9.0; 4 MB: 3.0-3.7 against 6.3-6.4; past
// the limit such a host's private allreduces take the pieces too, after a
// descriptor exchange: runtime/comm/README.md). With a CPU per rank
// the ring stays ahead above 256 KB (2 ranks, 1 MB: ring 8.4-11.4 GB/s,
// small path 3.9-4.0: its slots leave the cache).
std::size_t auto_small_bytes(int ranks_on_host, long host_cpus);

// Whether, on a world whose ranks all share one host, an allreduce of the
// caller's own memory past the small path's limit runs in that path's
// 256 KB pieces instead of the ring (`Algorithm::kAuto`): with 2 ranks, or
// more ranks than CPUs (runtime/comm/README.md, "Pieces").
// distributed::auto_in_place_min_bytes follows the same rule.
bool private_allreduce_in_pieces(int ranks_on_host, long host_cpus);

namespace detail {
struct OpState;
}

// The completion of one asynchronous op. Move-only; wait() blocks until the
// op has run and rethrows its error (MismatchError, CommError, TimeoutError,
// ...). A Handle may be dropped without waiting: the op still runs.
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
  // The world over `bootstrap` (collective: every rank of the Bootstrap
  // calls it). Maps this host's shared-memory segment, connects the ring's
  // and the mesh's TCP streams, starts the progress thread; all-or-none:
  // when any rank fails, every rank throws naming it. The Communicator owns
  // the Bootstrap (split() uses it again).
  static std::unique_ptr<Communicator> create(std::unique_ptr<Bootstrap> bootstrap,
                                              const CommOptions& options = {});
  // The same over bootstrap_from_env(): MPI under mpirun, musterd's
  // rendezvous for worlds muster forms, else the world of one.
  static std::unique_ptr<Communicator> create(const CommOptions& options = {});
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual int local_rank() const = 0;
  virtual int local_size() const = 0;
  // The options in force (after environment overrides).
  virtual const CommOptions& options() const = 0;
  // What formed this world: the Bootstrap's kind() ("mpi", "store", "single", ...).
  virtual std::string bootstrap_kind() const = 0;
  // What the ring's links run over: "shm", "tcp", "mpi", "mixed" (they
  // differ on this rank), or "none" (a world of one).
  virtual std::string transport() const = 0;

  // In place: `data` holds `count` elements on entry and the reduction of
  // all ranks' buffers on return.
  // The synchronous calls are allreduce_async(...).wait() and the like; an
  // implementation may run them without a Handle (WorldCommunicator does,
  // for its small path when nothing else is queued).
  virtual void allreduce(void* data, std::size_t count, DataType dtype, const AllreduceOptions& options = {});
  virtual Handle allreduce_async(void* data, std::size_t count, DataType dtype,
                                 const AllreduceOptions& options = {}) = 0;

  // Root's `count` elements are copied into every rank's `data`.
  virtual void broadcast(void* data, std::size_t count, DataType dtype, int root, const OpOptions& options = {});
  virtual Handle broadcast_async(void* data, std::size_t count, DataType dtype, int root,
                                 const OpOptions& options = {}) = 0;

  // Every rank contributes `count` elements; `recv` receives size()*count,
  // rank i's block at i*count.
  virtual void allgather(const void* send, std::size_t count, DataType dtype, void* recv,
                         const OpOptions& options = {});
  virtual Handle allgather_async(const void* send, std::size_t count, DataType dtype, void* recv,
                                 const OpOptions& options = {}) = 0;

  // Like allgather with per-rank counts: *counts is resized to size() and
  // filled with each rank's count, *recv to the concatenation in rank order
  // (bytes, sum(counts) * dtype_size(dtype)).
  void allgatherv(const void* send, std::size_t count, DataType dtype, std::vector<char>* recv,
                  std::vector<std::size_t>* counts, const OpOptions& options = {});
  virtual Handle allgatherv_async(const void* send, std::size_t count, DataType dtype, std::vector<char>* recv,
                                  std::vector<std::size_t>* counts, const OpOptions& options = {}) = 0;

  // `send` holds sum(counts) elements on every rank (counts.size() == size(),
  // the same on every rank); rank r receives into `recv` its counts[r]
  // elements of the reduction, the block that starts at sum(counts[0..r)).
  // `send` is not modified. Every ReduceOp (kAverage divides by size()).
  void reducescatter(const void* send, void* recv, const std::vector<std::size_t>& counts, DataType dtype,
                     const ReduceScatterOptions& options = {});
  virtual Handle reducescatter_async(const void* send, void* recv, const std::vector<std::size_t>& counts,
                                     DataType dtype, const ReduceScatterOptions& options = {}) = 0;

  // Point to point between every pair of ranks. `send` holds
  // sum(send_counts) elements, the block for rank j (send_counts[j] elements)
  // at sum(send_counts[0..j)). *recv_counts is resized to size() and filled
  // with what each rank sent this one, *recv to those blocks in rank order
  // (bytes). alltoall with equal blocks is send_counts all equal.
  void alltoall(const void* send, const std::vector<std::size_t>& send_counts, DataType dtype,
                std::vector<char>* recv, std::vector<std::size_t>* recv_counts, const OpOptions& options = {});
  virtual Handle alltoall_async(const void* send, const std::vector<std::size_t>& send_counts, DataType dtype,
                                std::vector<char>* recv, std::vector<std::size_t>* recv_counts,
                                const OpOptions& options = {}) = 0;
  // The same into the caller's memory when it knows what each rank sends it
  // (torch's all_to_all_single): `recv` holds sum(recv_counts) elements. A
  // rank that sends a count other than the receiver's recv_counts entry is a
  // MismatchError on every rank.
  virtual Handle alltoallv_async(const void* send, const std::vector<std::size_t>& send_counts, void* recv,
                                 const std::vector<std::size_t>& recv_counts, DataType dtype,
                                 const OpOptions& options = {}) = 0;

  virtual void barrier(const OpOptions& options = {});

  // No communication: throws CommError naming a peer known to be gone (on
  // this host: exited, or closed its Communicator), so a caller about to
  // compute toward its next op (a backward pass whose gradients it will
  // allreduce) can stop now rather than at that op. Peers on other hosts
  // are not checked (their failure shows at the next op). Any thread.
  virtual void check_peers() {}
  virtual Handle barrier_async(const OpOptions& options = {}) = 0;

  // Point to point (torch.distributed's send / recv / isend / irecv),
  // outside the collectives' order: a send and its recv need no other rank,
  // and may be issued before, after or between any collectives. Messages
  // travel on links of their own (point_to_point.h has the contract): a
  // byte ring each way in the host's shared-memory segment between ranks of
  // one host, a TCP stream of their own between hosts.
  // - Messages match by (sender, tag); between one pair with one tag they
  //   are received in the order sent. recv from kAnySource takes the first
  //   message with its tag to arrive from any rank and writes the sender to
  //   *source (when not null) before its Handle completes.
  // - `bytes` must equal the message's: otherwise that recv fails with
  //   MismatchError naming the sender and both sizes (the message is
  //   dropped; the send has completed).
  // - A send completes once its bytes have left `data` (the receiver drains
  //   every message as it arrives: into the recv's buffer when one is
  //   posted, else into memory of its own until a recv claims it).
  // - Errors: TimeoutError (P2pOptions::timeout), CommError naming a peer
  //   that is gone; neither breaks the collectives, nor ops with other
  //   ranks. InvalidArgument for a rank out of range or this rank itself.
  static constexpr int kAnySource = -1;
  virtual Handle send_async(const void* data, std::size_t bytes, int dst, const P2pOptions& options = {});
  virtual Handle recv_async(void* data, std::size_t bytes, int src, const P2pOptions& options = {},
                            int* source = nullptr);

  // A process set: collective over this Communicator (every rank calls it,
  // in the same order relative to its other collectives, with the same
  // `ranks` and `name`; MismatchError on every rank otherwise). `ranks` are
  // ranks of this Communicator, sorted and unique (InvalidArgument
  // otherwise). Returns a Communicator among them, with rank = index in
  // `ranks`, on the members, and null on the others. Its ops are
  // independent of this one's (its own links and progress thread), may be
  // interleaved with them in any order, and it may outlive or be destroyed
  // before this one. Formed through this Communicator's Bootstrap
  // (Bootstrap::subset), on the calling thread.
  virtual std::unique_ptr<Communicator> split(const std::vector<int>& ranks, const std::string& name) = 0;

  // Collective: every rank calls it, in the same order relative to its other
  // collectives, with the same `bytes`. See "Shared buffers" above.
  virtual std::unique_ptr<SharedBuffer> allocate_shared(std::size_t bytes) = 0;

  // True when allreduces may run direct here: the whole world on this host,
  // with a shared-memory segment (AllreduceOptions::shared_fd is ignored
  // otherwise).
  virtual bool shares_host_memory() const { return false; }
  // Unmaps the file (st_dev, st_ino) that allreduces with shared_fd had this
  // rank map, its own and its peers' (a no-op for one never mapped). Local:
  // a later op on the file on any rank maps it again on all. Any thread; an
  // op in flight on the file keeps the mapping until it is done.
  virtual void forget_shared_file(uint64_t device, uint64_t inode) {
    (void)device;
    (void)inode;
  }
};

}  // namespace muster::runtime::comm
