// WorldCommunicator's data paths: the allreduce algorithms, alltoall,
// split and shared buffers (world_communicator.h names the other files).
#include <algorithm>
#include <cstring>

#include "runtime/comm/mpi/mpi_world.h"
#include "runtime/comm/reduce.h"
#include "runtime/comm/ring_allreduce.h"
#include "runtime/comm/shm/direct_allreduce.h"
#include "runtime/comm/world_communicator.h"

namespace muster::runtime::comm {
namespace {

// The ring's block when every link is TCP and I/O threads move the bytes
// (inline: tcp_inline_block_bytes).
constexpr std::size_t kTcpRingBlockBytes = 16u << 20;

// Idle polls of the TCP links (a readv and sendmsg each) before ppoll.
constexpr uint32_t kTcpPauseRounds = 8;

}  // namespace

std::size_t WorldCommunicator::tcp_ring_block_bytes() const {
  return tcp_io_threads() ? kTcpRingBlockBytes : tcp_inline_block_bytes(ring_round_trip_us_, size_);
}

void WorldCommunicator::allreduce_ring(void* data, std::size_t count, DataType dtype, ReduceOp op,
                                       Watchdog& watchdog) {
  // Both links in shared memory: sleep on this rank's doorbell when idle.
  if (ring_all_shm_) watchdog.set_sleeper(sleeper_.get(), options_.spin);
  // Both links TCP: wait in ppoll on the streams after a few polls. No
  // spinning: the kernel's TCP work (softirqs, copies) may need the CPU a
  // spinning rank holds, and ppoll wakes it as soon as a stream can move.
  if (ring_all_tcp_) watchdog.set_sleeper(tcp_.ring.get(), std::chrono::microseconds(0), kTcpPauseRounds);
  RingContext ctx;
  ctx.rank = rank_;
  ctx.size = size_;
  ctx.segment_bytes = options_.segment_bytes;
  ctx.block_bytes = options_.block_bytes;
  // Every link TCP (decided alike everywhere): tcp_ring_block_bytes(),
  // unless MUSTER_COMM_BLOCK_BYTES says otherwise. Each block costs 2 (p - 1)
  // hand-offs around the ring, each waiting for the slowest rank. With I/O
  // threads 16 MB: the kernel's copies run on threads of their own, so that
  // wait, not the cache, is what counts (bench/multihost, 64 MB, 16 cores:
  // 2 hosts 4.6 GB/s at 16 MB blocks against 3.3 at 1 MB). Inline the
  // progress thread does every copy, so the block is kept in cache as far
  // as the ring's round trip allows (tcp_inline_block_bytes): bench-shaped,
  // same passes, 5 Gbit/s with no added delay, 1 MB against 4 MB blocks,
  // 2 hosts 0.90-0.95x against 0.83-0.89x of the rate, 4 hosts 0.66-0.77x
  // against 0.60-0.71x; with 200 us added (a 205-220 us round trip) 4 MB
  // still wins (2 hosts 0.91-0.94x against 0.88-0.90x), and it is kept.
  if (tcp_ring_everywhere_ && !block_from_env_) {
    ctx.block_bytes = tcp_ring_block_bytes();
  }
  ring_allreduce(data, count, dtype, op, ctx, *send_link_, *recv_link_, watchdog);
}

void WorldCommunicator::allreduce_mpi(void* data, std::size_t count, DataType dtype, ReduceOp op,
                                      Watchdog& watchdog) {
  if (count > static_cast<std::size_t>(INT32_MAX)) {
    throw InvalidArgument(watchdog.what() + ": count " + std::to_string(count) +
                          " exceeds MPI's int limit; use the ring (Algorithm::kAuto)");
  }
  MPI_Request request;
  mpi::check(MPI_Iallreduce(MPI_IN_PLACE, data, static_cast<int>(count), mpi::datatype(dtype),
                            mpi::reduce_op(op, dtype), mpi_comm_, &request),
             watchdog.what() + ": MPI_Iallreduce");
  for (;;) {
    int flag = 0;
    mpi::check(MPI_Test(&request, &flag, MPI_STATUS_IGNORE), watchdog.what() + ": MPI_Iallreduce");
    if (flag) break;
    watchdog.idle(-1);
  }
  if (op == ReduceOp::kAverage) divide(data, count, dtype, size_);
}

void WorldCommunicator::allreduce_direct(const shm::RegionTable::Found& found, std::size_t count, DataType dtype,
                                         ReduceOp op, Watchdog& watchdog) {
  watchdog.set_sleeper(sleeper_.get(), options_.spin);
  shm::DirectOp direct;
  direct.region_id = found.id;
  direct.offset = found.offset;
  direct.count = count;
  direct.dtype = dtype;
  direct.op = op;
  direct.block_bytes = options_.block_bytes;
  shm::direct_allreduce(*found.region, *segment_, direct, watchdog);
}

// ---------------------------------------------------------------------------
// Alltoall: the counts travel in the descriptor exchange's payload (this
// rank's send counts; for alltoallv also what it expects from each rank),
// so every rank knows every block's size before any data moves.

namespace {

std::vector<uint64_t> as_u64(const std::vector<std::size_t>& v) { return std::vector<uint64_t>(v.begin(), v.end()); }

// Rank r's u64 at index i in its payload (n entries, then n more for alltoallv).
uint64_t entry(const ControlPlane::Record& rec, std::size_t i) {
  uint64_t v;
  std::memcpy(&v, rec.payload + i * sizeof v, sizeof v);
  return v;
}

}  // namespace

Handle WorldCommunicator::alltoall_async(const void* send, const std::vector<std::size_t>& send_counts, DataType dtype,
                                         std::vector<char>* recv, std::vector<std::size_t>* recv_counts,
                                         const OpOptions& options) {
  Call call;
  call.desc.kind = static_cast<uint8_t>(OpKind::kAlltoall);
  call.desc.dtype = static_cast<uint8_t>(dtype);
  call.desc.name_hash = op_name_hash(options.name);
  call.desc.shape_hash = shape_hash(options.shape);
  call.name = options.name;
  std::size_t total = 0;
  for (std::size_t k : send_counts) total += k;
  call.desc.count = total;
  call.what = "alltoall(" + std::to_string(total) + " x " + dtype_name(dtype) + ")";
  if (send_counts.size() != static_cast<std::size_t>(size_)) {
    call.invalid = "send_counts has " + std::to_string(send_counts.size()) + " entries, the world " +
                   std::to_string(size_) + " ranks";
  } else if (!recv || !recv_counts) {
    call.invalid = "recv and recv_counts must not be null";
  } else if (total > 0 && send == nullptr) {
    call.invalid = "null send buffer";
  }
  auto counts = std::make_shared<std::vector<uint64_t>>(as_u64(send_counts));
  return submit(std::move(call), [=](Call& c, Watchdog& watchdog) {
    const std::size_t esize = dtype_size(dtype);
    if (size_ == 1) {
      if (!c.invalid.empty()) throw InvalidArgument(c.what + ": " + c.invalid);
      recv_counts->assign(1, send_counts[0]);
      recv->assign(static_cast<const char*>(send), static_cast<const char*>(send) + total * esize);
      return;
    }
    const auto& records = checked_exchange(c, counts->data(), counts->size() * sizeof(uint64_t), watchdog);
    AlltoallPlan plan;
    plan.rank = rank_;
    plan.send = static_cast<const char*>(send);
    std::size_t off = 0, roff = 0;
    recv_counts->assign(static_cast<std::size_t>(size_), 0);
    for (int r = 0; r < size_; ++r) {
      const auto ur = static_cast<std::size_t>(r);
      plan.send_offsets.push_back(off);
      plan.send_bytes.push_back(send_counts[ur] * esize);
      off += send_counts[ur] * esize;
      (*recv_counts)[ur] = static_cast<std::size_t>(entry(records[ur], static_cast<std::size_t>(rank_)));
      plan.recv_offsets.push_back(roff);
      plan.recv_bytes.push_back((*recv_counts)[ur] * esize);
      roff += (*recv_counts)[ur] * esize;
    }
    recv->assign(roff, 0);
    plan.recv = recv->data();
    alltoall_pairwise(plan, peer_links_, watchdog);
  });
}

Handle WorldCommunicator::alltoallv_async(const void* send, const std::vector<std::size_t>& send_counts, void* recv,
                                          const std::vector<std::size_t>& recv_counts, DataType dtype,
                                          const OpOptions& options) {
  Call call;
  call.desc.kind = static_cast<uint8_t>(OpKind::kAlltoall);
  call.desc.dtype = static_cast<uint8_t>(dtype);
  call.desc.name_hash = op_name_hash(options.name);
  call.desc.shape_hash = shape_hash(options.shape);
  call.name = options.name;
  std::size_t total = 0, rtotal = 0;
  for (std::size_t k : send_counts) total += k;
  for (std::size_t k : recv_counts) rtotal += k;
  call.desc.count = total;
  call.what = "alltoallv(" + std::to_string(total) + " x " + dtype_name(dtype) + ")";
  if (send_counts.size() != static_cast<std::size_t>(size_) || recv_counts.size() != static_cast<std::size_t>(size_)) {
    call.invalid = "send_counts and recv_counts need " + std::to_string(size_) + " entries each, got " +
                   std::to_string(send_counts.size()) + " and " + std::to_string(recv_counts.size());
  } else if ((total > 0 && send == nullptr) || (rtotal > 0 && recv == nullptr)) {
    call.invalid = "null buffer";
  }
  auto counts = std::make_shared<std::vector<uint64_t>>(as_u64(send_counts));
  counts->insert(counts->end(), recv_counts.begin(), recv_counts.end());
  return submit(std::move(call), [=](Call& c, Watchdog& watchdog) {
    const std::size_t esize = dtype_size(dtype);
    if (size_ == 1) {
      if (!c.invalid.empty()) throw InvalidArgument(c.what + ": " + c.invalid);
      if (send_counts[0] != recv_counts[0]) {
        throw MismatchError(c.what + ": rank 0 sends itself " + std::to_string(send_counts[0]) + " elements but expects " +
                            std::to_string(recv_counts[0]));
      }
      if (total) std::memmove(recv, send, total * esize);
      return;
    }
    const auto& records = checked_exchange(c, counts->data(), counts->size() * sizeof(uint64_t), watchdog);
    // Does every rank send every other what that one expects? All ranks
    // check the same numbers, so all throw alike.
    const auto n = static_cast<std::size_t>(size_);
    std::string wrong;
    for (std::size_t i = 0; i < n && wrong.size() < 400; ++i) {
      for (std::size_t j = 0; j < n; ++j) {
        const uint64_t sends = entry(records[i], j), expects = entry(records[j], n + i);
        if (sends != expects) {
          wrong += std::string(wrong.empty() ? "" : "; ") + "rank " + std::to_string(i) + " sends " +
                   std::to_string(sends) + " elements to rank " + std::to_string(j) + ", which expects " +
                   std::to_string(expects);
        }
      }
    }
    if (!wrong.empty()) throw MismatchError(c.what + " #" + std::to_string(c.desc.seq) + ": " + wrong);
    AlltoallPlan plan;
    plan.rank = rank_;
    plan.send = static_cast<const char*>(send);
    plan.recv = static_cast<char*>(recv);
    std::size_t off = 0, roff = 0;
    for (std::size_t r = 0; r < n; ++r) {
      plan.send_offsets.push_back(off);
      plan.send_bytes.push_back(send_counts[r] * esize);
      off += send_counts[r] * esize;
      plan.recv_offsets.push_back(roff);
      plan.recv_bytes.push_back(recv_counts[r] * esize);
      roff += recv_counts[r] * esize;
    }
    alltoall_pairwise(plan, peer_links_, watchdog);
  });
}

// ---------------------------------------------------------------------------
// Process sets: the members agree through this Communicator's descriptors
// (kind split, the members' hash, the name), then form a world of their own
// through Bootstrap::subset on the calling thread.

std::unique_ptr<Communicator> WorldCommunicator::split(const std::vector<int>& ranks, const std::string& name) {
  std::lock_guard<std::mutex> lock(split_mu_);
  Call call;
  call.desc.kind = static_cast<uint8_t>(OpKind::kSplit);
  call.desc.name_hash = op_name_hash(name);
  std::vector<uint64_t> members(ranks.begin(), ranks.end());
  call.desc.detail = counts_hash(members);
  call.name = name;
  call.what = "split('" + name + "', " + std::to_string(ranks.size()) + " ranks)";
  if (ranks.empty()) call.invalid = "no ranks given";
  for (std::size_t i = 0; i < ranks.size() && call.invalid.empty(); ++i) {
    if (ranks[i] < 0 || ranks[i] >= size_) {
      call.invalid = "rank " + std::to_string(ranks[i]) + " is not a rank of this " + std::to_string(size_) +
                     "-rank world";
    } else if (i > 0 && ranks[i] <= ranks[i - 1]) {
      call.invalid = "ranks must be sorted and unique (" + std::to_string(ranks[i - 1]) + " then " +
                     std::to_string(ranks[i]) + ")";
    }
  }
  if (name.empty()) call.invalid = "a process set needs a name";
  auto seq = std::make_shared<uint64_t>(0);
  submit(std::move(call), [=](Call& c, Watchdog& watchdog) {
    if (size_ > 1 || !c.invalid.empty()) {
      if (size_ == 1) throw InvalidArgument(c.what + ": " + c.invalid);
      checked_exchange(c, nullptr, 0, watchdog);
    }
    *seq = c.desc.seq;
  }).wait();
  if (!std::binary_search(ranks.begin(), ranks.end(), rank_)) return nullptr;
  // The op's number (the same on every rank) keeps a name reused later apart.
  auto sub = bootstrap_->subset(ranks, name + "#" + std::to_string(*seq));
  return std::make_unique<WorldCommunicator>(std::move(sub), options_);
}

// ---------------------------------------------------------------------------
// Shared buffers.

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

std::vector<std::string> WorldCommunicator::host_allgather(const std::string& mine, Watchdog& watchdog) {
  OpDescriptor d;
  d.kind = static_cast<uint8_t>(OpKind::kAllocateShared);
  const auto& records = control_->exchange(d, mine.data(), mine.size(), watchdog);
  std::vector<std::string> out;
  for (const auto& r : records) out.emplace_back(r.payload ? r.payload : "", r.header.payload_bytes);
  return out;
}

WorldCommunicator::Adopted WorldCommunicator::find_adopted(const shm::SharedRegion::File& file) {
  std::lock_guard<std::mutex> lock(adopted_mu_);
  auto it = adopted_.find({file.device, file.inode});
  return it == adopted_.end() ? Adopted{} : it->second;
}

WorldCommunicator::Adopted WorldCommunicator::adopt_file(const shm::SharedRegion::File& file, std::size_t need,
                                                         Watchdog& watchdog) {
  shm::SharedRegion::AdoptResult result;
  auto region = shm::SharedRegion::adopt(shm_local_, size_, file, need,
                                         [&](const std::string& mine) { return host_allgather(mine, watchdog); },
                                         &result);
  // The same result on every rank: ids stay in step, and a host where files
  // cannot be opened across processes stops trying.
  if (result == shm::SharedRegion::AdoptResult::kUnavailable) adoption_off_ = true;
  if (!region) return {};
  Adopted adopted{++next_region_id_, std::shared_ptr<shm::SharedRegion>(std::move(region))};
  std::lock_guard<std::mutex> lock(adopted_mu_);
  adopted_[{file.device, file.inode}] = adopted;  // replaces a mapping other ranks had dropped
  return adopted;
}

void WorldCommunicator::forget_shared_file(uint64_t device, uint64_t inode) {
  std::lock_guard<std::mutex> lock(adopted_mu_);
  adopted_.erase({device, inode});
}

std::unique_ptr<SharedBuffer> WorldCommunicator::allocate_shared(std::size_t bytes) {
  std::unique_ptr<SharedBuffer> result;
  Call call;
  call.desc.kind = static_cast<uint8_t>(OpKind::kAllocateShared);
  call.desc.count = bytes;
  call.what = "allocate_shared(" + std::to_string(bytes) + " bytes)";
  submit(std::move(call), [&](Call& c, Watchdog& watchdog) {
    if (size_ > 1) checked_exchange(c, nullptr, 0, watchdog);  // every rank asks for the same size
    // Every rank sees the same direct_capable_, and create() fails on all or none.
    if (direct_capable_) {
      auto region = shm::SharedRegion::create(shm_local_, size_, bytes,
                                              [&](const std::string& mine) { return host_allgather(mine, watchdog); });
      if (region) {
        result = std::make_unique<RegionBuffer>(std::move(region), ++next_region_id_, regions_);
        return;
      }
    }
    result = make_private_buffer(bytes);
  }).wait();
  return result;
}

}  // namespace muster::runtime::comm
