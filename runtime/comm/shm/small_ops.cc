#include "runtime/comm/shm/small_ops.h"

#include <immintrin.h>
#include <sched.h>
#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <optional>
#include <utility>

#include "runtime/comm/chunking.h"
#include "runtime/comm/reduce.h"
#include "runtime/error.h"

namespace muster::runtime::comm::shm {
namespace {

constexpr std::size_t kLine = 64;
constexpr uint32_t kPollsWithoutPause = 256;

std::size_t round_up(std::size_t n, std::size_t to) { return (n + to - 1) / to * to; }

// Reduction in any order gives the same bits: two ranks (a op b == b op a),
// min/max, or integers. Otherwise a flat allreduce reduces in rank order.
bool order_free(int n, DataType dtype, ReduceOp op) {
  return n == 2 || op == ReduceOp::kMin || op == ReduceOp::kMax || dtype == DataType::kInt32 ||
         dtype == DataType::kInt64;
}

// Calls piece(first, n) for consecutive runs of at most `per` of `count`
// elements: one round each (once, with n = 0, for an empty op).
template <typename F>
void for_each_piece(std::size_t count, std::size_t per, F&& piece) {
  std::size_t first = 0;
  do {
    const std::size_t n = std::min(per, count - first);
    piece(first, n);
    first += n;
  } while (first < count);
}

}  // namespace

// Written by its rank: the doorbell its peers ring, and the round whose
// chunk it has reduced (two-phase allreduce). Read by the others.
struct alignas(kLine) SmallOps::RankState {
  std::atomic<uint32_t> doorbell;  // futex word
  std::atomic<uint32_t> sleeping;  // 1 while the rank may sleep on it
  alignas(kLine) std::atomic<uint64_t> reduced;
};

// A slot: a line with the op's descriptor, then the line the peers poll
// (which round the slot holds, the payload's size and a digest of the
// descriptor), whose last 40 bytes are the payload's first: a peer waiting
// for a scalar reads one cache line per rank. The full descriptors are read
// only when the digests differ. The round is stored last (release), so a
// reader that sees it sees the rest.
struct alignas(kLine) SmallOps::SlotDesc {
  OpDescriptor desc;
};
struct SmallOps::SlotHead {
  std::atomic<uint64_t> round;
  uint64_t bytes;
  uint64_t digest;
};
constexpr std::size_t kHeadBytes = 24;  // sizeof(SlotHead); the payload follows
static_assert(sizeof(OpDescriptor) <= kLine, "a descriptor fits its line");

namespace {

// Every word of the descriptor, mixed (any difference between two ranks'
// descriptors changes it but by a 2^-64 chance).
uint64_t digest_of(const OpDescriptor& d) {
  uint64_t w[sizeof(OpDescriptor) / 8];
  std::memcpy(w, &d, sizeof w);
  uint64_t h = 0x9e3779b97f4a7c15ull;
  for (uint64_t x : w) {
    h ^= x + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
    h *= 0xff51afd7ed558ccdull;
  }
  return h ^ (h >> 33);
}

}  // namespace

// This rank's futex doorbell as the Watchdog's Sleeper. sleep() announces
// itself, re-checks what the waiter waits for, and only then sleeps: a peer
// that publishes rings only ranks it sees asleep, so one of the two always
// sees the other (both sides use sequentially consistent accesses).
class SmallOps::Doorbell final : public Sleeper {
 public:
  explicit Doorbell(RankState* own) : own_(own) {}
  using Recheck = bool (*)(const void*);
  void set_recheck(Recheck fn, const void* ctx) {
    recheck_ = fn;
    ctx_ = ctx;
  }
  void prepare() override { seen_ = own_->doorbell.load(); }
  void sleep(std::chrono::microseconds max) override {
    own_->sleeping.store(1);
    if (!(recheck_ && recheck_(ctx_))) {
      timespec ts{static_cast<time_t>(max.count() / 1000000), static_cast<long>(max.count() % 1000000) * 1000};
      syscall(SYS_futex, reinterpret_cast<uint32_t*>(&own_->doorbell), FUTEX_WAIT, seen_, &ts, nullptr, 0);
    }
    own_->sleeping.store(0);
  }

 private:
  RankState* own_;
  uint32_t seen_ = 0;
  Recheck recheck_ = nullptr;
  const void* ctx_ = nullptr;
};

// One op's waits: spin on the flags for options.spin first, with no clock
// read per poll and no allocation; past that, a Watchdog (built then) backs
// off onto the doorbell, checks liveness and enforces the timeout.
class SmallOps::Waiter {
 public:
  Waiter(SmallOps& ops, const OpDescriptor& desc, Watchdog* external = nullptr)
      : ops_(ops), desc_(desc), external_(external) {
    if (external_) external_->set_sleeper(ops_.doorbell_.get(), ops_.options_.spin, 64);
  }

  void prepare() {
    if (Watchdog* w = active()) w->prepare();
  }
  void progressed() {
    if (Watchdog* w = active()) w->progressed();
  }
  // Nothing was ready; `waiting_on` is the world rank waited for.
  // `recheck` says whether it is ready now (for the doorbell, see above).
  template <typename Recheck>
  void idle(int waiting_on, const Recheck& recheck) {
    if (external_) {
      ops_.doorbell_->set_recheck([](const void* c) { return (*static_cast<const Recheck*>(c))(); }, &recheck);
      external_->idle(waiting_on);
      ops_.doorbell_->set_recheck(nullptr, nullptr);
      return;
    }
    if (!watchdog_) {
      if ((++polls_ & 63) != 0) {
        // The first polls without a pause: a pause costs ~40 ns here, and
        // a peer's line usually arrives within the first few hundred polls
        // (2 ranks, 8 B: 0.65-0.69 -> 0.55-0.65 us per op). Past them the
        // pause spares a sibling hyperthread.
        if (polls_ > kPollsWithoutPause) _mm_pause();
        return;
      }
      const auto now = ops_.options_.now();
      if (polls_ == 64) spin_start_ = now;
      if (now - spin_start_ < ops_.options_.spin) {
        _mm_pause();
        return;
      }
      if (now - spin_start_ < ops_.options_.spin + ops_.options_.yield) {
        polls_ |= 63;  // the clock at every poll from here
        sched_yield();
        return;
      }
      watchdog_.emplace(ops_.options_.timeout, ops_.monitor_, desc_.seq, ops_.describe(desc_), ops_.options_.now);
      // The spin is over: from here idle polls sleep on the doorbell.
      watchdog_->set_sleeper(ops_.doorbell_.get(), std::chrono::microseconds(0), 2);
      watchdog_->set_abort(ops_.options_.abort);
    }
    ops_.doorbell_->set_recheck([](const void* c) { return (*static_cast<const Recheck*>(c))(); }, &recheck);
    watchdog_->idle(waiting_on);
    ops_.doorbell_->set_recheck(nullptr, nullptr);
  }

 private:
  Watchdog* active() { return external_ ? external_ : watchdog_ ? &*watchdog_ : nullptr; }

  SmallOps& ops_;
  const OpDescriptor& desc_;
  Watchdog* external_;
  uint32_t polls_ = 0;
  Watchdog::Clock::time_point spin_start_{};
  std::optional<Watchdog> watchdog_;
};

std::size_t SmallOps::area_bytes(int local_size, std::size_t capacity) {
  const std::size_t n = static_cast<std::size_t>(local_size);
  return n * sizeof(RankState) + n * 2 * (sizeof(SlotDesc) + round_up(kHeadBytes + capacity, kLine));
}

SmallOps::SmallOps(const SmallOpsArea& area, int local_rank, std::vector<int> world_ranks,
                   const SmallOpsOptions& options, PeerMonitor* monitor)
    : options_(options),
      base_(static_cast<char*>(area.base)),
      n_(area.local_size),
      me_(local_rank),
      capacity_(options.capacity),
      slot_stride_(sizeof(SlotDesc) + round_up(kHeadBytes + options.capacity, kLine)),
      world_ranks_(std::move(world_ranks)),
      monitor_(monitor) {
  MUSTER_CHECK(base_ != nullptr && reinterpret_cast<uintptr_t>(base_) % kLine == 0,
               "SmallOps: the shared area must be 64-byte aligned");
  MUSTER_CHECK(n_ >= 1 && me_ >= 0 && me_ < n_, "SmallOps: local rank " << me_ << " of " << n_);
  MUSTER_CHECK(capacity_ >= 64, "SmallOps: a slot of " << capacity_ << " bytes holds no piece of an op");
  MUSTER_CHECK_EQ(world_ranks_.size(), static_cast<std::size_t>(n_), "SmallOps: one world rank per local rank");
  doorbell_ = std::make_unique<Doorbell>(state(me_));
  pending_.reserve(static_cast<std::size_t>(n_));
}

SmallOps::~SmallOps() = default;

SmallOps::RankState* SmallOps::state(int r) const {
  return reinterpret_cast<RankState*>(base_ + sizeof(RankState) * static_cast<std::size_t>(r));
}

SmallOps::SlotDesc* SmallOps::desc_at(int r, uint64_t round) const {
  const std::size_t index = static_cast<std::size_t>(r) * 2 + (round & 1);
  return reinterpret_cast<SlotDesc*>(base_ + sizeof(RankState) * static_cast<std::size_t>(n_) + slot_stride_ * index);
}

SmallOps::SlotHead* SmallOps::head(int r, uint64_t round) const {
  return reinterpret_cast<SlotHead*>(reinterpret_cast<char*>(desc_at(r, round)) + sizeof(SlotDesc));
}

char* SmallOps::slot_data(int r, uint64_t round) const { return reinterpret_cast<char*>(head(r, round)) + kHeadBytes; }

std::string SmallOps::describe(const OpDescriptor& desc) const {
  std::string s = op_kind_name(static_cast<OpKind>(desc.kind));
  s += " #" + std::to_string(desc.seq) + " (";
  if (desc.kind != static_cast<uint8_t>(OpKind::kBarrier)) {
    s += std::to_string(desc.count) + " x " + dtype_name(static_cast<DataType>(desc.dtype));
    if (desc.kind == static_cast<uint8_t>(OpKind::kAllreduce)) {
      // reduce_op is ReduceOp + 1 (0: none).
      if (desc.reduce_op > 0) s += ", " + std::string(reduce_op_name(static_cast<ReduceOp>(desc.reduce_op - 1)));
    }
    if (desc.kind == static_cast<uint8_t>(OpKind::kBroadcast)) s += ", root " + std::to_string(desc.root);
    s += ", ";
  }
  s += "shared-memory small path) on rank " + std::to_string(world_ranks_[static_cast<std::size_t>(me_)]);
  return s;
}

void SmallOps::ring_sleepers() {
  for (int p = 0; p < n_; ++p) {
    if (p == me_) continue;
    RankState* s = state(p);
    if (s->sleeping.load()) {
      s->doorbell.fetch_add(1);
      syscall(SYS_futex, reinterpret_cast<uint32_t*>(&s->doorbell), FUTEX_WAKE, 1, nullptr, nullptr, 0);
    }
  }
}

void SmallOps::arrive(const OpDescriptor& desc, std::size_t bytes, Waiter& wait) {
  const uint64_t k = round_;
  desc_at(me_, k)->desc = desc;
  SlotHead* mine = head(me_, k);
  mine->bytes = bytes;
  mine->digest = digest_of(desc);
  mine->round.store(k);  // sequentially consistent: ordered before reading `sleeping`
  ring_sleepers();

  // Wait until every peer holds round k in its slot of this parity.
  pending_.clear();
  for (int i = 1; i < n_; ++i) pending_.push_back((me_ + i) % n_);
  auto arrived = [&](int p) { return head(p, k)->round.load(std::memory_order_acquire) == k; };
  auto any_arrived = [&] { return std::any_of(pending_.begin(), pending_.end(), arrived); };
  while (!pending_.empty()) {
    wait.prepare();
    const std::size_t before = pending_.size();
    pending_.erase(std::remove_if(pending_.begin(), pending_.end(), arrived), pending_.end());
    if (pending_.empty()) break;
    if (pending_.size() != before) {
      wait.progressed();
    } else {
      wait.idle(world_ranks_[static_cast<std::size_t>(pending_.front())], any_arrived);
    }
  }
}

void SmallOps::check(const OpDescriptor& desc, const std::string* name, Waiter& wait) {
  // Every descriptor against rank 0's; a difference (rare) gets the full
  // comparison, whose message every rank builds alike.
  const uint64_t k = round_;
  const uint64_t first = head(0, k)->digest;
  bool same = true;
  for (int p = 1; p < n_ && same; ++p) same = head(p, k)->digest == first;
  if (same) return;
  std::vector<OpDescriptor> all;
  for (int p = 0; p < n_; ++p) all.push_back(desc_at(p, k)->desc);
  if (describe_mismatch(all).empty()) return;
  // Every rank saw the same descriptors, so every rank runs this round too:
  // the names, to quote them.
  const std::string mine = name ? name->substr(0, std::min<std::size_t>(name->size(), std::min<std::size_t>(capacity_, 256))) : "";
  const uint64_t x = ++round_;
  std::memcpy(slot_data(me_, x), mine.data(), mine.size());
  arrive(desc, mine.size(), wait);
  std::vector<std::string> names;
  for (int p = 0; p < n_; ++p) names.emplace_back(slot_data(p, x), head(p, x)->bytes);
  throw MismatchError(describe_mismatch(all, names));
}

const std::vector<SmallRecord>& SmallOps::exchange(const OpDescriptor& desc, const void* payload, std::size_t bytes,
                                                   Watchdog* watchdog) {
  if (bytes > capacity_) {
    throw InvalidArgument("control exchange: a payload of " + std::to_string(bytes) + " bytes exceeds the " +
                          std::to_string(capacity_) + " a shared-memory slot holds");
  }
  Waiter wait(*this, desc, watchdog);
  const uint64_t k = ++round_;
  if (bytes) std::memcpy(slot_data(me_, k), payload, bytes);
  arrive(desc, bytes, wait);
  records_.resize(static_cast<std::size_t>(n_));
  for (int p = 0; p < n_; ++p) {
    records_[static_cast<std::size_t>(p)] =
        SmallRecord{desc_at(p, k)->desc, slot_data(p, k), static_cast<std::size_t>(head(p, k)->bytes)};
  }
  return records_;
}

void SmallOps::allreduce(void* data, std::size_t count, DataType dtype, ReduceOp op, const OpDescriptor& desc,
                         const std::string* name) {
  if (count > 0 && data == nullptr) throw InvalidArgument("small allreduce: null buffer");
  const std::size_t esize = dtype_size(dtype);
  for_each_piece(count, capacity_ / esize, [&](std::size_t first, std::size_t n) {
    allreduce_round(static_cast<char*>(data) + first * esize, n, dtype, op, desc, name);
  });
}

void SmallOps::allreduce_round(char* data, std::size_t count, DataType dtype, ReduceOp op, const OpDescriptor& desc,
                               const std::string* name) {
  // A Waiter per round: each piece's waits spin (or yield) before they sleep.
  Waiter wait(*this, desc);
  const std::size_t esize = dtype_size(dtype);
  const std::size_t bytes = count * esize;
  const uint64_t k = ++round_;
  const bool flat = n_ == 1 || bytes <= (n_ == 2 ? options_.pair_flat_max_bytes : options_.flat_max_bytes);
  const Chunking chunks{count, n_};
  char* mine = slot_data(me_, k);
  if (flat) {
    std::memcpy(mine, data, bytes);
  } else {
    // The peers read only the chunks they reduce.
    const std::size_t b = chunks.begin(me_) * esize, e = b + chunks.length(me_) * esize;
    std::memcpy(mine, data, b);
    std::memcpy(mine + e, data + e, bytes - e);
  }
  arrive(desc, bytes, wait);
  check(desc, name, wait);
  if (count == 0 || n_ == 1) return;

  if (flat) {
    // Flat: every rank reduces every slot.
    // The last reduction also averages, in the same pass (reduce_last_into).
    if (order_free(n_, dtype, op)) {
      for (int i = 1; i < n_ - 1; ++i) reduce_into(data, slot_data((me_ + i) % n_, k), count, dtype, op);
      reduce_last_into(data, slot_data((me_ + n_ - 1) % n_, k), count, dtype, op, n_);
    } else {
      std::memcpy(data, slot_data(0, k), bytes);
      for (int p = 1; p < n_ - 1; ++p) reduce_into(data, slot_data(p, k), count, dtype, op);
      reduce_last_into(data, slot_data(n_ - 1, k), count, dtype, op, n_);
    }
    return;
  }

  // Two-phase: reduce this rank's chunk where it lies, in its own buffer,
  // publish the result in its slot, then copy the peers' chunks out of theirs.
  const std::size_t own_at = chunks.begin(me_) * esize;
  const std::size_t own_count = chunks.length(me_);
  if (own_count > 0) {
    for (int i = 1; i < n_ - 1; ++i) reduce_into(data + own_at, slot_data((me_ + i) % n_, k) + own_at, own_count, dtype, op);
    reduce_last_into(data + own_at, slot_data((me_ + n_ - 1) % n_, k) + own_at, own_count, dtype, op, n_);
    std::memcpy(mine + own_at, data + own_at, own_count * esize);
  }
  state(me_)->reduced.store(k);
  ring_sleepers();
  pending_.clear();
  for (int i = 1; i < n_; ++i) pending_.push_back((me_ + i) % n_);
  auto reduced = [&](int p) { return state(p)->reduced.load(std::memory_order_acquire) >= k; };
  auto any_reduced = [&] { return std::any_of(pending_.begin(), pending_.end(), reduced); };
  while (!pending_.empty()) {
    wait.prepare();
    bool moved = false;
    for (std::size_t i = 0; i < pending_.size();) {
      const int p = pending_[i];
      if (reduced(p)) {
        const std::size_t at = chunks.begin(p) * esize;
        std::memcpy(data + at, slot_data(p, k) + at, chunks.length(p) * esize);
        pending_.erase(pending_.begin() + static_cast<std::ptrdiff_t>(i));
        moved = true;
      } else {
        ++i;
      }
    }
    if (pending_.empty()) break;
    if (moved) {
      wait.progressed();
    } else {
      wait.idle(world_ranks_[static_cast<std::size_t>(pending_.front())], any_reduced);
    }
  }
}

void SmallOps::broadcast(void* data, std::size_t count, DataType dtype, int root, const OpDescriptor& desc,
                         const std::string* name) {
  if (root < 0 || root >= n_) throw InvalidArgument("small broadcast: root " + std::to_string(root) + " of " + std::to_string(n_));
  if (count > 0 && data == nullptr) throw InvalidArgument("small broadcast: null buffer");
  const std::size_t esize = dtype_size(dtype);
  for_each_piece(count, capacity_ / esize, [&](std::size_t first, std::size_t n) {
    Waiter wait(*this, desc);
    char* at = static_cast<char*>(data) + first * esize;
    const std::size_t bytes = n * esize;
    const uint64_t k = ++round_;
    if (me_ == root) std::memcpy(slot_data(me_, k), at, bytes);
    arrive(desc, me_ == root ? bytes : 0, wait);
    check(desc, name, wait);
    if (me_ != root) std::memcpy(at, slot_data(root, k), bytes);
  });
}

void SmallOps::allgather(const void* send, std::size_t count, DataType dtype, void* recv, const OpDescriptor& desc,
                         const std::string* name) {
  if (count > 0 && (send == nullptr || recv == nullptr)) throw InvalidArgument("small allgather: null buffer");
  const std::size_t esize = dtype_size(dtype);
  const std::size_t block = count * esize;
  char* out = static_cast<char*>(recv);
  for_each_piece(count, capacity_ / esize, [&](std::size_t first, std::size_t n) {
    Waiter wait(*this, desc);
    const std::size_t at = first * esize, bytes = n * esize;
    const uint64_t k = ++round_;
    std::memcpy(slot_data(me_, k), static_cast<const char*>(send) + at, bytes);
    arrive(desc, bytes, wait);
    check(desc, name, wait);
    for (int p = 0; p < n_; ++p) std::memcpy(out + static_cast<std::size_t>(p) * block + at, slot_data(p, k), bytes);
  });
}

void SmallOps::barrier(const OpDescriptor& desc, const std::string* name) {
  Waiter wait(*this, desc);
  ++round_;
  arrive(desc, 0, wait);
  check(desc, name, wait);
}

}  // namespace muster::runtime::comm::shm
