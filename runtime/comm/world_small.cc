// WorldCommunicator's small paths: an op whose data came inline with the
// descriptors, and the single-host path of a world whose ranks all share
// this host (world_communicator.h names the other files; shm/small_ops.h the
// engine).
//
// Where a latency-bound op's microseconds went before this path, and what
// each step below saves, is in runtime/comm/README.md ("Small messages").
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <utility>

#include "runtime/comm/reduce.h"
#include "runtime/comm/world_communicator.h"

namespace muster::runtime::comm {
namespace {

uint8_t reduce_code(ReduceOp op) { return static_cast<uint8_t>(static_cast<int>(op) + 1); }

// The SmallOps area of a host stays within this many bytes.
constexpr std::size_t kSmallAreaBudget = std::size_t{32} << 20;

// A slot holds at most this much of an op; a larger op runs in pieces of it.
// With more ranks than CPUs (4 on 2 cores, interleaved runs) 256 KB pieces
// moved 16-64 MB at 5.5-5.8 GB/s, 512 KB ones at 4.3-5.8 and 1 MB ones at
// 4.3-4.8; a 4 MB op ran at 6.3-6.4 in pieces against 3.3-3.4 as one round:
// the slots of two rounds (2 x n x 256 KB) stay in the cache, and a piece
// waits twice.
constexpr std::size_t kPieceBytes = std::size_t{256} << 10;

}  // namespace

std::size_t WorldCommunicator::small_capacity(int host_size) const {
  // Small ops' data, and any exchange's payload (the names a mismatch
  // quotes, alltoall's counts, reduce-scatter's and allgatherv's inline data).
  const std::size_t floor = std::max<std::size_t>({options_.inline_bytes, 16 * static_cast<std::size_t>(size_), 512});
  const std::size_t budget = kSmallAreaBudget / (2 * static_cast<std::size_t>(std::max(host_size, 1)));
  return std::max(floor, std::min({options_.small_bytes, budget, kPieceBytes}) / 64 * 64);
}

void WorldCommunicator::form_small(int host_size) {
  if (!segment_ || !segment_->small_area() || host_size != size_ || size_ < 2) return;
  shm::SmallOpsOptions o;
  o.capacity = small_capacity(host_size);
  o.timeout = options_.timeout;
  // Ranks with a CPU each spin (the peer is about to publish). Ranks that
  // share CPUs do not spin, or the spinner holds the CPU its peer needs
  // (4 ranks on 2 cores: 50 us of spin made a round 10x slower); they poll
  // with sched_yield for up to 100 us, which hands the CPU to the peer that
  // shares it, then sleep on the doorbell. On 4 ranks and 2 cores that
  // halved an 8 B allreduce (load 7: 85-125 us sleeping at once, 42-50 us
  // yielding first; 1 ms of yielding was no better). The ring never yields
  // (watchdog.cc: another busy process may take the CPU for a whole slice);
  // a small op yields at most 100 us per wait.
  const bool oversubscribed = local_size_ > sysconf(_SC_NPROCESSORS_ONLN);
  o.spin = oversubscribed ? std::chrono::microseconds(0) : options_.spin;
  o.yield = oversubscribed ? std::chrono::microseconds(100) : std::chrono::microseconds(0);
  o.abort = &closing_;
  std::vector<int> world(static_cast<std::size_t>(size_));
  for (int r = 0; r < size_; ++r) world[static_cast<std::size_t>(r)] = r;
  small_ = std::make_unique<shm::SmallOps>(shm::SmallOpsArea{segment_->small_area(), size_}, shm_local_,
                                           std::move(world), o, monitor_.get());
  small_limit_ = options_.small_bytes;
  // The ring's 2 (n - 1) steps per block each wait for a descheduled
  // neighbour here; pieces wait twice each (runtime/comm/README.md). With
  // two ranks, a CPU each, pieces move the same bytes as the ring's two
  // steps, with one exchange per 256 KB instead of one per segment: 16-256 MB
  // at 13.7-15.0 GB/s against the ring's 12.6-14.2 when traffic between the
  // VM's cores is cheap; when not, 4-7% behind at 1-16 MB and 4-5% ahead at
  // 64-256 MB (runtime/comm/README.md, "Pieces").
  pieces_over_ring_ = private_allreduce_in_pieces(local_size_, sysconf(_SC_NPROCESSORS_ONLN));
}

template <typename F>
void WorldCommunicator::run_lean(OpDescriptor& desc, const char* what, F&& body) {
  const uint64_t seq = ++seq_;
  desc.seq = seq;
  if (broken_) std::rethrow_exception(broken_);
  if (closing_.load()) {
    throw CommError(std::string(what) + " #" + std::to_string(seq) + ": the communicator was closed before this op ran");
  }
  if (monitor_) monitor_->begin_op(seq);
  try {
    body();
    if (monitor_) monitor_->end_op(seq);
  } catch (const MismatchError&) {
    throw;  // thrown before any data moved
  } catch (const InvalidArgument&) {
    throw;  // likewise
  } catch (const CommError& e) {
    broken_ = std::current_exception();
    break_links(e.rank());
    throw;
  } catch (const std::exception& e) {
    broken_ = std::make_exception_ptr(CommError(std::string(what) + " #" + std::to_string(seq) + " failed: " + e.what()));
    break_links(-1);
    throw;
  }
}

OpDescriptor WorldCommunicator::small_descriptor(OpKind kind, DataType dtype, std::size_t count,
                                                const std::string& name, const std::vector<int64_t>& shape) {
  OpDescriptor d;
  d.kind = static_cast<uint8_t>(kind);
  d.dtype = static_cast<uint8_t>(dtype);
  d.count = count;
  d.name_hash = op_name_hash(name);
  d.shape_hash = shape_hash(shape);
  return d;
}

bool WorldCommunicator::allreduce_small_fits(void* data, std::size_t count, DataType dtype,
                                             const AllreduceOptions& options) const {
  return options.algorithm == Algorithm::kAuto && small_fits(count * dtype_size(dtype)) && (data || count == 0) &&
         dtype_valid(static_cast<uint8_t>(dtype));
}

bool WorldCommunicator::broadcast_small_fits(void* data, std::size_t count, DataType dtype, int root) const {
  return small_fits(count * dtype_size(dtype)) && root >= 0 && root < size_ && (data || count == 0) &&
         dtype_valid(static_cast<uint8_t>(dtype));
}

bool WorldCommunicator::allgather_small_fits(const void* send, std::size_t count, DataType dtype, void* recv) const {
  return small_fits(count * dtype_size(dtype)) && ((send && recv) || count == 0) &&
         dtype_valid(static_cast<uint8_t>(dtype));
}

Handle WorldCommunicator::allreduce_small(void* data, std::size_t count, DataType dtype,
                                          const AllreduceOptions& options) {
  OpDescriptor d = small_descriptor(OpKind::kAllreduce, dtype, count, options.name, options.shape);
  d.reduce_op = reduce_code(options.op);
  const ReduceOp op = options.op;
  return progress_->submit([this, d, data, count, dtype, op, name = options.name]() mutable {
    run_lean(d, "allreduce", [&] { small_->allreduce(data, count, dtype, op, d, &name); });
  });
}

Handle WorldCommunicator::broadcast_small(void* data, std::size_t count, DataType dtype, int root,
                                          const OpOptions& options) {
  OpDescriptor d = small_descriptor(OpKind::kBroadcast, dtype, count, options.name, options.shape);
  d.root = root;
  return progress_->submit([this, d, data, count, dtype, root, name = options.name]() mutable {
    run_lean(d, "broadcast", [&] { small_->broadcast(data, count, dtype, root, d, &name); });
  });
}

Handle WorldCommunicator::allgather_small(const void* send, std::size_t count, DataType dtype, void* recv,
                                          const OpOptions& options) {
  OpDescriptor d = small_descriptor(OpKind::kAllgather, dtype, count, options.name, options.shape);
  return progress_->submit([this, d, send, count, dtype, recv, name = options.name]() mutable {
    run_lean(d, "allgather", [&] { small_->allgather(send, count, dtype, recv, d, &name); });
  });
}

Handle WorldCommunicator::barrier_small(const OpOptions& options) {
  OpDescriptor d;
  d.kind = static_cast<uint8_t>(OpKind::kBarrier);
  d.name_hash = op_name_hash(options.name);
  return progress_->submit([this, d, name = options.name]() mutable {
    run_lean(d, "barrier", [&] { small_->barrier(d, &name); });
  });
}

// The synchronous calls: a small op with nothing queued before it runs here
// and now (ProgressThread::run_if_idle), with no Handle; anything else is
// the asynchronous call, waited on.

void WorldCommunicator::allreduce(void* data, std::size_t count, DataType dtype, const AllreduceOptions& options) {
  if (allreduce_small_fits(data, count, dtype, options)) {
    OpDescriptor d = small_descriptor(OpKind::kAllreduce, dtype, count, options.name, options.shape);
    d.reduce_op = reduce_code(options.op);
    if (progress_->run_if_idle([&] {
          run_lean(d, "allreduce", [&] { small_->allreduce(data, count, dtype, options.op, d, &options.name); });
        })) {
      return;
    }
  }
  allreduce_async(data, count, dtype, options).wait();
}

void WorldCommunicator::broadcast(void* data, std::size_t count, DataType dtype, int root, const OpOptions& options) {
  if (broadcast_small_fits(data, count, dtype, root)) {
    OpDescriptor d = small_descriptor(OpKind::kBroadcast, dtype, count, options.name, options.shape);
    d.root = root;
    if (progress_->run_if_idle([&] {
          run_lean(d, "broadcast", [&] { small_->broadcast(data, count, dtype, root, d, &options.name); });
        })) {
      return;
    }
  }
  broadcast_async(data, count, dtype, root, options).wait();
}

void WorldCommunicator::allgather(const void* send, std::size_t count, DataType dtype, void* recv,
                                  const OpOptions& options) {
  if (allgather_small_fits(send, count, dtype, recv)) {
    OpDescriptor d = small_descriptor(OpKind::kAllgather, dtype, count, options.name, options.shape);
    if (progress_->run_if_idle([&] {
          run_lean(d, "allgather", [&] { small_->allgather(send, count, dtype, recv, d, &options.name); });
        })) {
      return;
    }
  }
  allgather_async(send, count, dtype, recv, options).wait();
}

void WorldCommunicator::barrier(const OpOptions& options) {
  if (small_) {
    OpDescriptor d;
    d.kind = static_cast<uint8_t>(OpKind::kBarrier);
    d.name_hash = op_name_hash(options.name);
    if (progress_->run_if_idle([&] { run_lean(d, "barrier", [&] { small_->barrier(d, &options.name); }); })) return;
  }
  barrier_async(options).wait();
}

// The small path: the data came with the descriptors (at most inline_bytes
// per rank), so the op ends here. Every rank reduces the payloads in rank
// order, so every rank gets the same bits.
void WorldCommunicator::run_small(const Call& call, const std::vector<ControlPlane::Record>& records, void* data,
                                  void* recv) {
  const auto kind = static_cast<OpKind>(call.desc.kind);
  const auto dtype = static_cast<DataType>(call.desc.dtype);
  const std::size_t count = call.desc.count;
  const std::size_t bytes = count * dtype_size(dtype);
  switch (kind) {
    case OpKind::kAllreduce: {
      if (bytes == 0) return;
      const auto op = static_cast<ReduceOp>(call.desc.reduce_op - 1);
      // The sum builds in scratch: this rank's own payload is `data` itself.
      if (scratch_.size() < bytes) scratch_.resize(bytes);
      std::memcpy(scratch_.data(), records[0].payload, bytes);
      for (int r = 1; r < size_; ++r) {
        reduce_into(scratch_.data(), records[static_cast<std::size_t>(r)].payload, count, dtype, op);
      }
      if (op == ReduceOp::kAverage) divide(scratch_.data(), count, dtype, size_);
      std::memcpy(data, scratch_.data(), bytes);
      return;
    }
    case OpKind::kBroadcast: {
      const auto root = static_cast<std::size_t>(call.desc.root);
      if (bytes && static_cast<int>(root) != rank_) std::memcpy(data, records[root].payload, bytes);
      return;
    }
    case OpKind::kAllgather: {
      if (bytes == 0) return;
      // This rank's own block first: `data` may lie inside `recv`.
      char* out = static_cast<char*>(recv);
      std::memmove(out + static_cast<std::size_t>(rank_) * bytes, data, bytes);
      for (int r = 0; r < size_; ++r) {
        if (r != rank_) std::memcpy(out + static_cast<std::size_t>(r) * bytes, records[static_cast<std::size_t>(r)].payload, bytes);
      }
      return;
    }
    default: return;
  }
}

}  // namespace muster::runtime::comm
