// WorldCommunicator: queueing, the descriptor check, and which path each op
// takes (world_communicator.h names the other files).
#include "runtime/comm/world_communicator.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>

#include "api/base/settings.h"
#include "runtime/comm/comm_env.h"
#include "runtime/comm/mpi/mpi_world.h"
#include "runtime/comm/reduce.h"

namespace muster::runtime::comm {
namespace {

std::string describe(const char* op, std::size_t count, DataType dtype, const std::string& extra = "") {
  std::ostringstream os;
  os << op << "(" << count << " x " << dtype_name(dtype) << extra << ")";
  return os.str();
}

// The longest name quoted in a MismatchError.
constexpr std::size_t kQuotedNameBytes = 200;

}  // namespace

WorldCommunicator::WorldCommunicator(std::unique_ptr<Bootstrap> bootstrap, const CommOptions& options)
    : options_(apply_env(options)), bootstrap_(std::move(bootstrap)) {
  if (!bootstrap_) throw InvalidArgument("Communicator::create: no Bootstrap given");
  form();
  const auto env = base::Settings::environment();
  const auto debug = env.boolean("MUSTER_COMM_DEBUG", false);
  if (!debug.ok()) throw InvalidArgument(debug.error);
  if (debug.value) {
    // One line per rank saying how its world is wired (tests and operators check it).
    std::string blocks;
    if (tcp_ring_everywhere_ && !tcp_io_threads()) {
      blocks = ", ring round trip " + std::to_string(ring_round_trip_us_) + " us, " +
               std::to_string(tcp_ring_block_bytes() >> 10) + " KB blocks";
    }
    std::fprintf(stderr, "muster comm: rank %d of %d, %d on this host, ring links %s%s, formed by %s%s\n", rank_, size_,
                 local_size_, ring_transport_name().c_str(), tcp_io_threads() ? " (TCP I/O threads)" : "",
                 bootstrap_kind_.c_str(), blocks.c_str());
  }
  block_from_env_ = env.raw("MUSTER_COMM_BLOCK_BYTES").has_value();
  progress_ = std::make_unique<ProgressThread>();
}

WorldCommunicator::~WorldCommunicator() {
  closing_.store(true);  // an op waiting on a peer ends now (CommError)
  p2p_.reset();          // its pending ops fail; it writes nothing more before the peers see us closed
  if (monitor_) monitor_->mark_closed();  // and a local peer waiting on this rank learns it left
  progress_.reset();     // then the queue drains (each op fails at once) and the thread is joined
  control_.reset();
  small_.reset();
  peer_links_.clear();
  mesh_send_.clear();
  mesh_recv_.clear();
  send_link_.reset();
  recv_link_.reset();
  tcp_ = tcp::TcpLinks{};
  sleeper_.reset();
  monitor_.reset();
  segment_.reset();
  bootstrap_.reset();
}

Handle WorldCommunicator::send_async(const void* data, std::size_t bytes, int dst, const P2pOptions& options) {
  return p2p_->send(data, bytes, dst, options);
}

Handle WorldCommunicator::recv_async(void* data, std::size_t bytes, int src, const P2pOptions& options, int* source) {
  return p2p_->recv(data, bytes, src, options, source);
}

bool WorldCommunicator::tcp_io_threads() const { return tcp_.ring && tcp_.ring->io_threads(); }

std::string WorldCommunicator::ring_transport_name() const {
  if (!send_link_) return "none";
  auto name = [&](bool shm, bool tcp) { return shm ? "shm" : tcp ? "tcp" : "mpi"; };
  const std::string send = name(dynamic_cast<shm::ShmSendLink*>(send_link_.get()) != nullptr,
                                tcp_.ring && tcp_.ring->has_sender());
  const std::string recv = name(dynamic_cast<shm::ShmRecvLink*>(recv_link_.get()) != nullptr,
                                tcp_.ring && tcp_.ring->has_receiver());
  return send == recv ? send : "mixed";
}

bool WorldCommunicator::inline_fits(std::size_t bytes) const {
  return size_ > 1 && bytes <= options_.inline_bytes && bytes <= control_->payload_capacity();
}

Handle WorldCommunicator::submit(Call call, std::function<void(Call&, Watchdog&)> body) {
  return progress_->submit([this, call = std::move(call), body = std::move(body)]() mutable {
    const uint64_t seq = ++seq_;
    call.desc.seq = seq;
    if (broken_) std::rethrow_exception(broken_);
    if (closing_.load()) {
      throw CommError(call.what + " #" + std::to_string(seq) + ": the communicator was closed before this op ran");
    }
    if (monitor_) monitor_->begin_op(seq);
    Watchdog watchdog(options_.timeout, monitor_.get(), seq,
                      call.what + " #" + std::to_string(seq) + " on rank " + std::to_string(rank_));
    watchdog.set_abort(&closing_);
    try {
      body(call, watchdog);
      if (monitor_) monitor_->end_op(seq);
    } catch (const MismatchError&) {
      throw;  // thrown before any data moved: the links are as they were
    } catch (const InvalidArgument&) {
      throw;  // likewise (arguments are judged before the exchange's data moves)
    } catch (const CommError& e) {
      broken_ = std::current_exception();
      break_links(e.rank());
      throw;
    } catch (const std::exception& e) {
      // Anything else mid-op leaves the links in an unknown state.
      broken_ = std::make_exception_ptr(CommError(call.what + " #" + std::to_string(seq) + " failed: " + e.what()));
      break_links(-1);
      throw;
    }
  });
}

void WorldCommunicator::break_links(int blamed) {
  mpi::mark_failed();
  if (monitor_) monitor_->record_failure(blamed);
  if (tcp_.ring) tcp_.ring->abort(blamed);  // the right neighbour learns whom to blame
  for (auto& m : tcp_.mesh) {
    if (m) m->abort(blamed);
  }
}

const std::vector<ControlPlane::Record>& WorldCommunicator::checked_exchange(Call& call, const void* payload,
                                                                             std::size_t bytes, Watchdog& watchdog) {
  if (!call.invalid.empty()) {
    call.desc.flags |= kInvalidArguments;
    payload = nullptr;
    bytes = 0;
  }
  const auto& records = control_->exchange(call.desc, payload, bytes, watchdog);
  std::vector<OpDescriptor> all;
  all.reserve(records.size());
  for (const auto& r : records) all.push_back(r.header.desc);
  if (describe_mismatch(all).empty()) return records;
  // They differ: a second exchange brings every rank's name, to quote them.
  // Every rank saw the same descriptors, so all take part.
  const std::string name = call.name.substr(0, kQuotedNameBytes);
  const auto& named = control_->exchange(call.desc, name.data(), name.size(), watchdog);
  std::vector<std::string> names;
  for (const auto& r : named) names.emplace_back(r.payload ? r.payload : "", r.header.payload_bytes);
  if (!call.invalid.empty()) throw InvalidArgument(call.what + ": " + call.invalid);
  throw MismatchError(describe_mismatch(all, names));
}

void WorldCommunicator::check_peers() {
  if (!monitor_ || closing_.load()) return;
  try {
    monitor_->check_gone("the next collective (rank " + std::to_string(rank_) + ")");
  } catch (const CommError& e) {
    // As a failed op does: peers that see this rank exit next take it for
    // a survivor of `e.rank()`'s failure, not for the culprit.
    monitor_->record_failure(e.rank());
    throw;
  }
}

// ---------------------------------------------------------------------------
// The ops: validate on the caller's thread (a refusal still takes part in the
// exchange, so no rank pairs this op with another), then queue.

Handle WorldCommunicator::allreduce_async(void* data, std::size_t count, DataType dtype,
                                          const AllreduceOptions& options) {
  if (allreduce_small_fits(data, count, dtype, options)) {
    return allreduce_small(data, count, dtype, options);
  }
  Call call;
  call.desc.kind = static_cast<uint8_t>(OpKind::kAllreduce);
  call.desc.dtype = static_cast<uint8_t>(dtype);
  call.desc.reduce_op = static_cast<uint8_t>(static_cast<int>(options.op) + 1);
  call.desc.count = count;
  call.desc.name_hash = op_name_hash(options.name);
  call.desc.shape_hash = shape_hash(options.shape);
  call.name = options.name;
  call.what = describe("allreduce", count, dtype, std::string(", ") + reduce_op_name(options.op) + ", " +
                                                       algorithm_name(options.algorithm));
  if (count > 0 && data == nullptr) call.invalid = "null buffer with count " + std::to_string(count);
  if (!dtype_valid(static_cast<uint8_t>(dtype))) call.invalid = "unknown dtype";
  if (options.algorithm == Algorithm::kMpi && mpi_comm_ == MPI_COMM_NULL && size_ > 1) {
    call.invalid = "Algorithm::kMpi needs a world formed by MPI (mpirun); this one was formed by '" +
                   bootstrap_kind_ + "'";
  }
  const ReduceOp op = options.op;
  const Algorithm algorithm = options.algorithm;
  const int shared_fd = options.shared_fd;
  const std::size_t shared_offset = options.shared_offset;
  return submit(std::move(call), [=](Call& c, Watchdog& watchdog) {
    if (size_ == 1) {
      if (!c.invalid.empty()) throw InvalidArgument(c.what + ": " + c.invalid);
      return;  // the average of one rank is the data itself
    }
    const std::size_t bytes = count * dtype_size(dtype);
    const bool small = algorithm == Algorithm::kAuto && inline_fits(bytes);
    // Where the buffer lies: the direct path runs when it is the same place
    // of the same shared buffer (or adopted file) on every rank.
    shm::RegionTable::Found found;
    shm::SharedRegion::File file;  // the caller's shared file, when it offered one
    Adopted adopted;               // held while the op runs
    const bool may_direct = direct_capable_ && algorithm != Algorithm::kMpi && !small && c.invalid.empty();
    if (may_direct && !regions_->empty()) found = regions_->find(data, bytes);
    if (may_direct && found.id == 0 && shared_fd >= 0 && options_.check_ops && !adoption_off_ &&
        shm::SharedRegion::stat_file(shared_fd, &file) && shared_offset <= file.size &&
        bytes <= file.size - shared_offset) {
      file.offset = shared_offset;
      c.desc.flags |= kSharedFile;
      adopted = find_adopted(file);
      if (adopted.region && shared_offset + bytes <= adopted.region->bytes()) {
        found = {adopted.id, adopted.region.get(), shared_offset};
      }
    }
    if (found.id != 0) c.desc.detail = (found.id << 48) | found.offset;
    if (options_.check_ops || small || c.desc.detail != 0 || !c.invalid.empty()) {
      const auto& records = checked_exchange(c, small ? data : nullptr, small ? bytes : 0, watchdog);
      if (count == 0) return;
      if (small) return run_small(c, records, data, nullptr);
      bool direct = found.id != 0, all_files = true;
      for (const auto& r : records) {
        direct = direct && r.header.desc.detail == c.desc.detail;
        all_files = all_files && (r.header.desc.flags & kSharedFile);
      }
      if (direct) return allreduce_direct(found, count, dtype, op, watchdog);
      // Every rank offered its file and they are not all mapped alike yet:
      // all map them now (the same decision on every rank: it reads only
      // the records).
      if (all_files) {
        adopted = adopt_file(file, bytes, watchdog);
        if (adopted.region) return allreduce_direct({adopted.id, adopted.region.get(), shared_offset}, count, dtype,
                                                    op, watchdog);
      }
    }
    if (count == 0) return;
    if (algorithm == Algorithm::kMpi) return allreduce_mpi(data, count, dtype, op, watchdog);
    if (algorithm == Algorithm::kAuto && pieces_over_ring_ && c.invalid.empty()) {
      // Every rank passed the exchange with this op (and none found it
      // direct); the pieces compare what the exchange compared.
      OpDescriptor d = c.desc;
      d.flags = 0;
      d.detail = 0;
      return small_->allreduce(data, count, dtype, op, d, &c.name);
    }
    allreduce_ring(data, count, dtype, op, watchdog);
  });
}

Handle WorldCommunicator::broadcast_async(void* data, std::size_t count, DataType dtype, int root,
                                          const OpOptions& options) {
  if (broadcast_small_fits(data, count, dtype, root)) {
    return broadcast_small(data, count, dtype, root, options);
  }
  Call call;
  call.desc.kind = static_cast<uint8_t>(OpKind::kBroadcast);
  call.desc.dtype = static_cast<uint8_t>(dtype);
  call.desc.root = root;
  call.desc.count = count;
  call.desc.name_hash = op_name_hash(options.name);
  call.desc.shape_hash = shape_hash(options.shape);
  call.name = options.name;
  call.what = describe("broadcast", count, dtype, ", root " + std::to_string(root));
  if (root < 0 || root >= size_) {
    call.invalid = "root " + std::to_string(root) + " is not a rank of this " + std::to_string(size_) + "-rank world";
  }
  if (count > 0 && data == nullptr) call.invalid = "null buffer with count " + std::to_string(count);
  return submit(std::move(call), [=](Call& c, Watchdog& watchdog) {
    if (size_ == 1) {
      if (!c.invalid.empty()) throw InvalidArgument(c.what + ": " + c.invalid);
      return;
    }
    const std::size_t bytes = count * dtype_size(dtype);
    const bool small = inline_fits(bytes);
    if (options_.check_ops || small || !c.invalid.empty()) {
      const bool carries = small && rank_ == root;
      const auto& records = checked_exchange(c, carries ? data : nullptr, carries ? bytes : 0, watchdog);
      if (small) return run_small(c, records, data, nullptr);
    }
    ring_broadcast(data, bytes, root, ring_peers(), *send_link_, *recv_link_, watchdog);
  });
}

Handle WorldCommunicator::allgather_async(const void* send, std::size_t count, DataType dtype, void* recv,
                                          const OpOptions& options) {
  if (allgather_small_fits(send, count, dtype, recv)) {
    return allgather_small(send, count, dtype, recv, options);
  }
  Call call;
  call.desc.kind = static_cast<uint8_t>(OpKind::kAllgather);
  call.desc.dtype = static_cast<uint8_t>(dtype);
  call.desc.count = count;
  call.desc.name_hash = op_name_hash(options.name);
  call.desc.shape_hash = shape_hash(options.shape);
  call.name = options.name;
  call.what = describe("allgather", count, dtype);
  if (count > 0 && (send == nullptr || recv == nullptr)) call.invalid = "null buffer";
  return submit(std::move(call), [=](Call& c, Watchdog& watchdog) {
    const std::size_t bytes = count * dtype_size(dtype);
    char* out = static_cast<char*>(recv);
    if (size_ == 1) {
      if (!c.invalid.empty()) throw InvalidArgument(c.what + ": " + c.invalid);
      if (bytes && recv != send) std::memmove(recv, send, bytes);
      return;
    }
    const bool small = inline_fits(bytes);
    if (options_.check_ops || small || !c.invalid.empty()) {
      const auto& records = checked_exchange(c, small ? send : nullptr, small ? bytes : 0, watchdog);
      if (small) return run_small(c, records, const_cast<void*>(send), recv);
    }
    if (bytes == 0) return;
    if (out + static_cast<std::size_t>(rank_) * bytes != send) {
      std::memmove(out + static_cast<std::size_t>(rank_) * bytes, send, bytes);
    }
    std::vector<std::size_t> offsets(static_cast<std::size_t>(size_)), lengths(static_cast<std::size_t>(size_), bytes);
    for (int r = 0; r < size_; ++r) offsets[static_cast<std::size_t>(r)] = static_cast<std::size_t>(r) * bytes;
    ring_allgatherv(out, offsets, lengths, ring_peers(), *send_link_, *recv_link_, watchdog);
  });
}

Handle WorldCommunicator::allgatherv_async(const void* send, std::size_t count, DataType dtype,
                                           std::vector<char>* recv, std::vector<std::size_t>* counts,
                                           const OpOptions& options) {
  Call call;
  call.desc.kind = static_cast<uint8_t>(OpKind::kAllgatherv);
  call.desc.dtype = static_cast<uint8_t>(dtype);
  call.desc.count = count;
  call.desc.name_hash = op_name_hash(options.name);
  call.desc.shape_hash = shape_hash(options.shape);
  call.name = options.name;
  call.what = describe("allgatherv", count, dtype);
  if (!recv || !counts) call.invalid = "recv and counts must not be null";
  if (count > 0 && send == nullptr) call.invalid = "null send buffer with count " + std::to_string(count);
  return submit(std::move(call), [=](Call& c, Watchdog& watchdog) {
    const std::size_t esize = dtype_size(dtype);
    const std::size_t bytes = count * esize;
    if (size_ == 1) {
      if (!c.invalid.empty()) throw InvalidArgument(c.what + ": " + c.invalid);
      counts->assign(1, count);
      recv->assign(static_cast<const char*>(send), static_cast<const char*>(send) + bytes);
      return;
    }
    // Always exchanged: every rank learns the counts here, and small blocks come along.
    const bool small = inline_fits(bytes);
    const auto& records = checked_exchange(c, small ? send : nullptr, small ? bytes : 0, watchdog);
    counts->assign(static_cast<std::size_t>(size_), 0);
    std::vector<std::size_t> offsets(static_cast<std::size_t>(size_)), lengths(static_cast<std::size_t>(size_));
    std::size_t total = 0;
    bool all_inline = true;
    for (int r = 0; r < size_; ++r) {
      const auto ur = static_cast<std::size_t>(r);
      (*counts)[ur] = static_cast<std::size_t>(records[ur].header.desc.count);
      offsets[ur] = total;
      lengths[ur] = (*counts)[ur] * esize;
      total += lengths[ur];
      all_inline = all_inline && records[ur].header.payload_bytes == lengths[ur];
    }
    recv->assign(total, 0);
    if (total == 0) return;
    if (all_inline) {
      for (int r = 0; r < size_; ++r) {
        const auto ur = static_cast<std::size_t>(r);
        if (lengths[ur]) std::memcpy(recv->data() + offsets[ur], records[ur].payload, lengths[ur]);
      }
      return;
    }
    if (bytes) std::memcpy(recv->data() + offsets[static_cast<std::size_t>(rank_)], send, bytes);
    ring_allgatherv(recv->data(), offsets, lengths, ring_peers(), *send_link_, *recv_link_, watchdog);
  });
}

Handle WorldCommunicator::reducescatter_async(const void* send, void* recv, const std::vector<std::size_t>& counts,
                                              DataType dtype, const ReduceScatterOptions& options) {
  Call call;
  call.desc.kind = static_cast<uint8_t>(OpKind::kReduceScatter);
  call.desc.dtype = static_cast<uint8_t>(dtype);
  call.desc.reduce_op = static_cast<uint8_t>(static_cast<int>(options.op) + 1);
  call.desc.name_hash = op_name_hash(options.name);
  call.desc.shape_hash = shape_hash(options.shape);
  call.name = options.name;
  std::size_t total = 0;
  for (std::size_t k : counts) total += k;
  call.desc.count = total;
  call.desc.detail = counts_hash(std::vector<uint64_t>(counts.begin(), counts.end()));
  call.what = describe("reducescatter", total, dtype, std::string(", ") + reduce_op_name(options.op));
  if (counts.size() != static_cast<std::size_t>(size_)) {
    call.invalid = "counts has " + std::to_string(counts.size()) + " entries, the world " + std::to_string(size_) +
                   " ranks";
  } else if ((total > 0 && send == nullptr) || (counts[static_cast<std::size_t>(rank_)] > 0 && recv == nullptr)) {
    call.invalid = "null buffer";
  }
  if (!dtype_valid(static_cast<uint8_t>(dtype))) call.invalid = "unknown dtype";
  const ReduceOp op = options.op;
  return submit(std::move(call), [=](Call& c, Watchdog& watchdog) {
    if (size_ == 1) {
      if (!c.invalid.empty()) throw InvalidArgument(c.what + ": " + c.invalid);
      if (total) std::memmove(recv, send, total * dtype_size(dtype));  // the average of one rank is the data
      return;
    }
    const std::size_t bytes = total * dtype_size(dtype);
    const bool small = inline_fits(bytes);
    if (options_.check_ops || small || !c.invalid.empty()) {
      const auto& records = checked_exchange(c, small ? send : nullptr, small ? bytes : 0, watchdog);
      if (total == 0) return;
      if (small) {
        // Every rank's whole input came along: reduce this rank's block of
        // them, in rank order.
        const std::size_t esize = dtype_size(dtype);
        std::size_t begin = 0;
        for (int r = 0; r < rank_; ++r) begin += counts[static_cast<std::size_t>(r)];
        const std::size_t n = counts[static_cast<std::size_t>(rank_)];
        if (n == 0) return;
        std::memcpy(recv, records[0].payload + begin * esize, n * esize);
        for (int r = 1; r < size_; ++r) {
          reduce_into(recv, records[static_cast<std::size_t>(r)].payload + begin * esize, n, dtype, op);
        }
        if (op == ReduceOp::kAverage) divide(recv, n, dtype, size_);
        return;
      }
    }
    if (total == 0) return;
    ring_reducescatter(send, recv, counts, dtype, op, ring_peers(), *send_link_, *recv_link_, watchdog);
  });
}

Handle WorldCommunicator::barrier_async(const OpOptions& options) {
  if (small_) return barrier_small(options);
  Call call;
  call.desc.kind = static_cast<uint8_t>(OpKind::kBarrier);
  call.desc.name_hash = op_name_hash(options.name);
  call.name = options.name;
  call.what = "barrier";
  return submit(std::move(call), [=](Call& c, Watchdog& watchdog) {
    if (size_ == 1) return;
    checked_exchange(c, nullptr, 0, watchdog);  // every rank has arrived once it returns
  });
}

}  // namespace muster::runtime::comm
