#include "runtime/comm/world_communicator.h"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>

#include "runtime/comm/comm_env.h"
#include "runtime/comm/mpi/mpi_link.h"
#include "runtime/comm/mpi/mpi_world.h"
#include "runtime/comm/reduce.h"
#include "runtime/comm/ring_allreduce.h"
#include "runtime/comm/shm/direct_allreduce.h"
#include "runtime/comm/shm/shm_link.h"
#include "runtime/comm/tcp/interfaces.h"
#include "runtime/comm/tcp/ring_bootstrap.h"

namespace muster::runtime::comm {
namespace {

// CPUs this process may run on (its affinity mask: mpirun's binding counts).
int usable_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) != 0) return static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN));
  return CPU_COUNT(&set);
}

// The ring's block when every link is TCP (allreduce_ring).
constexpr std::size_t kTcpRingBlockBytes = 16u << 20;

// Idle polls of the TCP links (a readv and sendmsg each) before ppoll.
constexpr uint32_t kTcpPauseRounds = 8;

void check_count(std::size_t count, const char* what) {
  if (count > static_cast<std::size_t>(INT_MAX)) {
    throw InvalidArgument(std::string(what) + ": count " + std::to_string(count) +
                          " exceeds MPI's int limit; split the buffer");
  }
}

std::string describe(const char* op, std::size_t count, DataType dtype, const char* extra = "") {
  std::ostringstream os;
  os << op << "(" << count << " x " << dtype_name(dtype) << extra << ")";
  return os.str();
}

}  // namespace

WorldCommunicator::WorldCommunicator(const CommOptions& options) : options_(apply_env(options)) {
  with_mpi_ = mpi::launched_with_mpi();
  if (with_mpi_) {
    init_mpi();
    init_links();
  }
  if (const char* v = std::getenv("MUSTER_COMM_DEBUG"); v && *v && std::string(v) != "0") {
    // One line per rank saying how its ring is wired (tests and operators check it).
    std::fprintf(stderr, "muster comm: rank %d of %d, %d on this host, ring links %s%s\n", rank_, size_, local_size_,
                 ring_transport_name().c_str(), tcp_io_threads() ? " (TCP I/O threads)" : "");
  }
  if (options_.spin == CommOptions::kAutoSpin) {
    const long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    options_.spin = local_size_ <= cpus ? std::chrono::microseconds(5000) : std::chrono::microseconds(50);
  }
  block_from_env_ = std::getenv("MUSTER_COMM_BLOCK_BYTES") != nullptr;
  progress_ = std::make_unique<ProgressThread>();
}

WorldCommunicator::~WorldCommunicator() {
  progress_.reset();  // drain and join before tearing down what ops use
  send_link_.reset();
  recv_link_.reset();
  tcp_.reset();
  sleeper_.reset();
  monitor_.reset();
  segment_.reset();
  if (with_mpi_ && !broken_) {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) {
      if (local_comm_ != MPI_COMM_NULL) MPI_Comm_free(&local_comm_);
      if (comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
    }
  }
}

void WorldCommunicator::init_mpi() {
  mpi::ensure_initialized();
  mpi::check(MPI_Comm_dup(MPI_COMM_WORLD, &comm_), "MPI_Comm_dup(MPI_COMM_WORLD)");
  mpi::check(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
  MPI_Comm_rank(comm_, &rank_);
  MPI_Comm_size(comm_, &size_);
  mpi::check(MPI_Comm_split_type(comm_, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &local_comm_),
             "MPI_Comm_split_type(MPI_COMM_TYPE_SHARED)");
  MPI_Comm_set_errhandler(local_comm_, MPI_ERRORS_RETURN);
  MPI_Comm_rank(local_comm_, &shm_local_rank_);
  MPI_Comm_size(local_comm_, &local_size_);
  local_rank_ = shm_local_rank_;
  // Open MPI's own view of the host wins where it is set (same values under mpirun).
  local_rank_ = env_int("OMPI_COMM_WORLD_LOCAL_RANK", local_rank_);
  local_size_ = env_int("OMPI_COMM_WORLD_LOCAL_SIZE", local_size_);

  // Which host is every rank on, and its index there: leader's world rank + local rank.
  int leader = rank_;
  mpi::check(MPI_Bcast(&leader, 1, MPI_INT, 0, local_comm_), "MPI_Bcast(host leader)");
  int mine[2] = {leader, shm_local_rank_};
  std::vector<int> all(2 * static_cast<std::size_t>(size_));
  mpi::check(MPI_Allgather(mine, 2, MPI_INT, all.data(), 2, MPI_INT, comm_), "MPI_Allgather(host map)");
  host_of_.resize(static_cast<std::size_t>(size_));
  local_of_.resize(static_cast<std::size_t>(size_));
  for (int i = 0; i < size_; ++i) {
    host_of_[static_cast<std::size_t>(i)] = all[2 * static_cast<std::size_t>(i)];
    local_of_[static_cast<std::size_t>(i)] = all[2 * static_cast<std::size_t>(i) + 1];
  }
}

void WorldCommunicator::init_links() {
  int host_size = 1;
  MPI_Comm_size(local_comm_, &host_size);
  if (host_size > 1) {
    segment_ = shm::ShmSegment::create_shared(local_comm_, options_.segments_in_flight, options_.segment_bytes);
    if (segment_) {
      monitor_ = std::make_unique<shm::ShmPeerMonitor>(segment_.get(), shm_local_rank_, rank_);
      sleeper_ = std::make_unique<shm::DoorbellSleeper>(segment_->peer(shm_local_rank_));
    }
  }
  if (size_ == 1) return;
  const int right = (rank_ + 1) % size_;
  const int left = (rank_ + size_ - 1) % size_;
  auto same_host = [&](int peer) { return host_of_[static_cast<std::size_t>(peer)] == host_of_[static_cast<std::size_t>(rank_)]; };
  // Per link: shm on this host (kAuto, kShm), TCP between hosts (and
  // everywhere under kTcp), MPI everywhere under kMpi.
  enum class Kind { kShm, kTcp, kMpi };
  auto kind_to = [&](int peer) {
    switch (options_.ring_transport) {
      case RingTransport::kMpi: return Kind::kMpi;
      case RingTransport::kTcp: return Kind::kTcp;
      default: return segment_ && same_host(peer) ? Kind::kShm : Kind::kTcp;
    }
  };
  const Kind send_kind = kind_to(right), recv_kind = kind_to(left);
  // Collective: every rank takes part, even with no TCP link of its own.
  tcp::TcpRingOptions tcp_options;
  tcp_options.interface_spec = tcp::interface_spec_from_env(options_.tcp_interface);
  tcp_options.streams = options_.tcp_streams;
  tcp_options.socket_buffer_bytes = options_.tcp_socket_buffer_bytes;
  tcp_options.segment_bytes = options_.segment_bytes;
  tcp_options.in_flight = options_.segments_in_flight;
  tcp_options.timeout = options_.timeout;
  // kAuto: threads where there are CPUs for them (at least 4, and 2 for each
  // of this host's ranks). Decided for the whole job (threads only if every
  // rank would have them), since the ring's block size follows it.
  const int cpus = usable_cpus();
  int threads = options_.tcp_threads == CommOptions::TcpThreads::kOn ||
                (options_.tcp_threads == CommOptions::TcpThreads::kAuto && cpus >= 4 &&
                 cpus >= 2 * std::max(local_size_, 1));
  mpi::check(MPI_Allreduce(MPI_IN_PLACE, &threads, 1, MPI_INT, MPI_MIN, comm_), "MPI_Allreduce(TCP I/O threads)");
  tcp_options.io_threads = threads != 0;
  tcp_options.whole_job_on_one_host =
      std::all_of(host_of_.begin(), host_of_.end(), [&](int h) { return h == host_of_[0]; });
  tcp_ = tcp::connect_ring(comm_, send_kind == Kind::kTcp, recv_kind == Kind::kTcp, tcp_options);
  switch (send_kind) {
    case Kind::kShm:
      send_link_ = std::make_unique<shm::ShmSendLink>(segment_.get(), shm_local_rank_, right,
                                                      local_of_[static_cast<std::size_t>(right)]);
      break;
    case Kind::kTcp: send_link_ = tcp_->send_link(); break;
    case Kind::kMpi: send_link_ = std::make_unique<mpi::MpiSendLink>(comm_, right, options_.segments_in_flight); break;
  }
  switch (recv_kind) {
    case Kind::kShm:
      recv_link_ = std::make_unique<shm::ShmRecvLink>(segment_.get(), local_of_[static_cast<std::size_t>(left)], left);
      break;
    case Kind::kTcp: recv_link_ = tcp_->recv_link(); break;
    case Kind::kMpi:
      recv_link_ = std::make_unique<mpi::MpiRecvLink>(comm_, left, options_.segment_bytes, options_.segments_in_flight);
      break;
  }
  ring_all_shm_ = sleeper_ && send_kind == Kind::kShm && recv_kind == Kind::kShm;
  ring_all_tcp_ = send_kind == Kind::kTcp && recv_kind == Kind::kTcp;
  // Every link of the ring TCP: decided from what every rank knows alike (the
  // options and the host map), since the block size below must agree.
  std::vector<int> hosts = host_of_;
  std::sort(hosts.begin(), hosts.end());
  const bool one_rank_per_host = std::unique(hosts.begin(), hosts.end()) == hosts.end();
  tcp_ring_everywhere_ = options_.ring_transport == RingTransport::kTcp ||
                         (options_.ring_transport == RingTransport::kAuto && one_rank_per_host && size_ > 1);
  direct_capable_ = segment_ && segment_->local_size() == size_ && options_.ring_transport != RingTransport::kMpi &&
                    options_.ring_transport != RingTransport::kTcp;
}

bool WorldCommunicator::tcp_io_threads() const { return tcp_ && tcp_->io_threads(); }

std::string WorldCommunicator::ring_transport_name() const {
  if (!send_link_) return "none";
  auto name = [&](bool shm, bool tcp) { return shm ? "shm" : tcp ? "tcp" : "mpi"; };
  const std::string send = name(dynamic_cast<shm::ShmSendLink*>(send_link_.get()) != nullptr,
                                tcp_ && tcp_->has_sender());
  const std::string recv = name(dynamic_cast<shm::ShmRecvLink*>(recv_link_.get()) != nullptr,
                                tcp_ && tcp_->has_receiver());
  return send == recv ? send : "mixed";
}

Handle WorldCommunicator::submit(std::string what, Op op) {
  return progress_->submit([this, what = std::move(what), op = std::move(op)] {
    const uint64_t seq = ++seq_;
    if (broken_) std::rethrow_exception(broken_);
    if (monitor_) monitor_->begin_op(seq);
    Watchdog watchdog(options_.timeout, monitor_.get(), seq, what + " #" + std::to_string(seq) + " on rank " +
                                                                 std::to_string(rank_));
    try {
      op(watchdog);
    } catch (const CommError& e) {
      broken_ = std::current_exception();
      mpi::mark_failed();
      if (monitor_) monitor_->record_failure(e.rank());
      if (tcp_) tcp_->abort(e.rank());  // the right neighbour learns whom to blame
      throw;
    }
  });
}

void WorldCommunicator::wait_request(MPI_Request* request, Watchdog& watchdog, const char* what) {
  for (;;) {
    int flag = 0;
    MPI_Status status;
    mpi::check(MPI_Test(request, &flag, &status), watchdog.what() + ": " + what);
    if (flag) return;
    watchdog.idle(-1);
  }
}

Handle WorldCommunicator::allreduce_async(void* data, std::size_t count, DataType dtype,
                                          const AllreduceOptions& options) {
  if (count > 0 && data == nullptr) throw InvalidArgument("allreduce: null buffer with count " + std::to_string(count));
  Algorithm algorithm = options.algorithm;
  if (algorithm == Algorithm::kAuto) {
    algorithm = count * dtype_size(dtype) >= options_.ring_threshold_bytes ? Algorithm::kRing : Algorithm::kMpi;
  }
  if (algorithm == Algorithm::kMpi) check_count(count, "allreduce");
  const ReduceOp op = options.op;
  // In a shared buffer any size runs direct unless MPI's algorithm was asked for.
  const bool direct_allowed = options.algorithm != Algorithm::kMpi;
  std::string extra = std::string(", ") + reduce_op_name(op) + ", " + algorithm_name(algorithm);
  return submit(describe("allreduce", count, dtype, extra.c_str()), [=](Watchdog& watchdog) {
    if (count == 0 || size_ == 1) return;  // average of one rank is the data itself
    if (try_allreduce_direct(data, count, dtype, op, direct_allowed, watchdog)) return;
    if (algorithm == Algorithm::kRing) {
      allreduce_ring(data, count, dtype, op, watchdog);
    } else {
      allreduce_mpi(data, count, dtype, op, watchdog);
    }
  });
}

void WorldCommunicator::allreduce_mpi(void* data, std::size_t count, DataType dtype, ReduceOp op,
                                      Watchdog& watchdog) {
  MPI_Request request;
  mpi::check(MPI_Iallreduce(MPI_IN_PLACE, data, static_cast<int>(count), mpi::datatype(dtype),
                            mpi::reduce_op(op, dtype), comm_, &request),
             watchdog.what() + ": MPI_Iallreduce");
  wait_request(&request, watchdog, "MPI_Iallreduce");
  if (op == ReduceOp::kAverage) divide(data, count, dtype, size_);
}

void WorldCommunicator::allreduce_ring(void* data, std::size_t count, DataType dtype, ReduceOp op,
                                       Watchdog& watchdog) {
  // Both links in shared memory: sleep on this rank's doorbell when idle.
  if (ring_all_shm_) watchdog.set_sleeper(sleeper_.get(), options_.spin);
  // Both links TCP: wait in ppoll on the streams after a few polls. No
  // spinning: the kernel's TCP work (softirqs, copies) may need the CPU a
  // spinning rank holds, and ppoll wakes it as soon as a stream can move.
  if (ring_all_tcp_) watchdog.set_sleeper(tcp_.get(), std::chrono::microseconds(0), kTcpPauseRounds);
  RingContext ctx;
  ctx.rank = rank_;
  ctx.size = size_;
  ctx.segment_bytes = options_.segment_bytes;
  ctx.block_bytes = options_.block_bytes;
  // Every link TCP and I/O threads on every rank (both decided alike
  // everywhere): 16 MB blocks, unless MUSTER_COMM_BLOCK_BYTES says otherwise.
  // Each block costs 2 (p - 1) hand-offs around the ring, each waiting for the
  // slowest rank; with the kernel's copies on threads of their own that wait,
  // not the cache, is what counts. bench/multihost, 64 MB, 16 cores: 2 hosts
  // 4.6 GB/s at 16 MB blocks against 3.3 at 1 MB, 4 hosts the same as one
  // whole block. Inline (2 shared cores) the 1 MB blocks stay: the progress
  // thread does every copy, and a block still in cache for its allgather
  // saved 30-45% CPU per op there (1.3-1.7x the 16 MB blocks).
  if (tcp_ring_everywhere_ && tcp_io_threads() && !block_from_env_) ctx.block_bytes = kTcpRingBlockBytes;
  ring_allreduce(data, count, dtype, op, ctx, *send_link_, *recv_link_, watchdog);
}

bool WorldCommunicator::try_allreduce_direct(void* data, std::size_t count, DataType dtype, ReduceOp op,
                                             bool allowed, Watchdog& watchdog) {
  if (!direct_capable_ || regions_->empty()) return false;
  const auto found = allowed ? regions_->find(data, count * dtype_size(dtype)) : shm::RegionTable::Found{};
  if (found.id == 0) {
    shm::publish_other_op(*segment_, shm_local_rank_, watchdog.seq());
    return false;
  }
  watchdog.set_sleeper(sleeper_.get(), options_.spin);
  shm::DirectOp direct;
  direct.region_id = found.id;
  direct.offset = found.offset;
  direct.count = count;
  direct.dtype = dtype;
  direct.op = op;
  direct.block_bytes = options_.block_bytes;
  shm::direct_allreduce(*found.region, *segment_, direct, &direct_blocks_, watchdog);
  return true;
}

namespace {

// A SharedRegion registered with its Communicator while it lives.
class RegionBuffer final : public SharedBuffer {
 public:
  RegionBuffer(std::unique_ptr<shm::SharedRegion> region, uint64_t id, std::shared_ptr<shm::RegionTable> table)
      : region_(std::move(region)), id_(id), table_(std::move(table)) {
    table_->add(id_, region_.get());
  }
  ~RegionBuffer() override { table_->remove(id_); }
  void* data() override { return region_->mine(); }
  std::size_t bytes() const override { return region_->bytes(); }
  bool direct() const override { return true; }

 private:
  std::unique_ptr<shm::SharedRegion> region_;
  uint64_t id_;
  std::shared_ptr<shm::RegionTable> table_;
};

}  // namespace

std::unique_ptr<SharedBuffer> WorldCommunicator::allocate_shared(std::size_t bytes) {
  std::unique_ptr<SharedBuffer> result;
  submit("allocate_shared(" + std::to_string(bytes) + " bytes)", [&](Watchdog&) {
    // Every rank sees the same direct_capable_, and create() fails on all or none.
    if (direct_capable_) {
      if (auto region = shm::SharedRegion::create(local_comm_, bytes)) {
        result = std::make_unique<RegionBuffer>(std::move(region), ++next_region_id_, regions_);
        return;
      }
    }
    result = make_private_buffer(bytes);
  }).wait();
  return result;
}

Handle WorldCommunicator::broadcast_async(void* data, std::size_t count, DataType dtype, int root) {
  if (root < 0 || root >= size_) {
    throw InvalidArgument("broadcast: root " + std::to_string(root) + " is not a rank of this " +
                          std::to_string(size_) + "-rank world");
  }
  if (count > 0 && data == nullptr) throw InvalidArgument("broadcast: null buffer");
  check_count(count, "broadcast");
  const std::string extra = ", root " + std::to_string(root);
  return submit(describe("broadcast", count, dtype, extra.c_str()), [=](Watchdog& watchdog) {
    if (count == 0 || size_ == 1) return;
    MPI_Request request;
    mpi::check(MPI_Ibcast(data, static_cast<int>(count), mpi::datatype(dtype), root, comm_, &request),
               watchdog.what() + ": MPI_Ibcast", root);
    wait_request(&request, watchdog, "MPI_Ibcast");
  });
}

Handle WorldCommunicator::allgather_async(const void* send, std::size_t count, DataType dtype, void* recv) {
  if (count > 0 && (send == nullptr || recv == nullptr)) throw InvalidArgument("allgather: null buffer");
  check_count(count * static_cast<std::size_t>(size_), "allgather");
  return submit(describe("allgather", count, dtype), [=](Watchdog& watchdog) {
    if (count == 0) return;
    if (size_ == 1) {
      if (recv != send) std::memmove(recv, send, count * dtype_size(dtype));
      return;
    }
    MPI_Request request;
    const MPI_Datatype t = mpi::datatype(dtype);
    mpi::check(MPI_Iallgather(send, static_cast<int>(count), t, recv, static_cast<int>(count), t, comm_, &request),
               watchdog.what() + ": MPI_Iallgather");
    wait_request(&request, watchdog, "MPI_Iallgather");
  });
}

void WorldCommunicator::allgatherv(const void* send, std::size_t count, DataType dtype, std::vector<char>* recv,
                                   std::vector<std::size_t>* counts) {
  if (!recv || !counts) throw InvalidArgument("allgatherv: recv and counts must not be null");
  if (count > 0 && send == nullptr) throw InvalidArgument("allgatherv: null send buffer");
  check_count(count, "allgatherv");
  const std::size_t esize = dtype_size(dtype);
  submit(describe("allgatherv", count, dtype), [=](Watchdog& watchdog) {
    counts->assign(static_cast<std::size_t>(size_), 0);
    if (size_ == 1) {
      (*counts)[0] = count;
      recv->assign(static_cast<const char*>(send), static_cast<const char*>(send) + count * esize);
      return;
    }
    // a) everyone's count, b) the data at displacements from those counts.
    uint64_t mine = count;
    std::vector<uint64_t> all(static_cast<std::size_t>(size_));
    MPI_Request request;
    mpi::check(MPI_Iallgather(&mine, 1, MPI_UINT64_T, all.data(), 1, MPI_UINT64_T, comm_, &request),
               watchdog.what() + ": MPI_Iallgather(counts)");
    wait_request(&request, watchdog, "MPI_Iallgather(counts)");
    std::vector<int> icounts(static_cast<std::size_t>(size_)), displs(static_cast<std::size_t>(size_));
    uint64_t total = 0;
    for (int i = 0; i < size_; ++i) {
      const auto k = static_cast<std::size_t>(i);
      (*counts)[k] = static_cast<std::size_t>(all[k]);
      if (total + all[k] > static_cast<uint64_t>(INT_MAX)) {
        throw InvalidArgument("allgatherv: total count exceeds MPI's int limit");
      }
      icounts[k] = static_cast<int>(all[k]);
      displs[k] = static_cast<int>(total);
      total += all[k];
    }
    recv->assign(static_cast<std::size_t>(total) * esize, 0);
    if (total == 0) return;
    const MPI_Datatype t = mpi::datatype(dtype);
    mpi::check(MPI_Iallgatherv(count ? send : recv->data(), static_cast<int>(count), t, recv->data(),
                               icounts.data(), displs.data(), t, comm_, &request),
               watchdog.what() + ": MPI_Iallgatherv");
    wait_request(&request, watchdog, "MPI_Iallgatherv");
  }).wait();
}

Handle WorldCommunicator::barrier_async() {
  return submit("barrier", [=](Watchdog& watchdog) {
    if (size_ == 1) return;
    MPI_Request request;
    mpi::check(MPI_Ibarrier(comm_, &request), watchdog.what() + ": MPI_Ibarrier");
    wait_request(&request, watchdog, "MPI_Ibarrier");
  });
}

}  // namespace muster::runtime::comm
