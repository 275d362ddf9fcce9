// In-process ranks on threads for the DistributedOptimizer unit tests.
//
// FakeWorld(n) is a world of n ranks; world.rank(r) is rank r's Collectives.
// Every collective is a rendezvous: each rank posts its call, the last one
// to arrive checks that all posted the same kind/count/dtype/op/root (a
// mismatch throws on every rank, as a real deadlock would be a hang) and
// computes the result for everyone in double precision. A rank that does not
// arrive within `timeout` makes the waiting ranks throw TimeoutError naming
// it. fail_rank(r, after) makes rank r's calls fail with CommError after
// `after` successful collectives, as if its peer link broke.
#pragma once

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "runtime/comm/half.h"
#include "runtime/distributed/collectives.h"
#include "runtime/error.h"

namespace muster::runtime::distributed::testing {

class FakeWorld {
 public:
  enum class Kind { kAllreduce, kBroadcast, kAllgather, kAllgatherv };

  struct Call {
    Kind kind = Kind::kAllreduce;
    const void* send = nullptr;
    void* recv = nullptr;
    std::size_t count = 0;
    DataType dtype = DataType::kFloat32;
    comm::ReduceOp op = comm::ReduceOp::kSum;
    int root = 0;
    std::vector<char>* vrecv = nullptr;
    std::vector<std::size_t>* vcounts = nullptr;
  };

  FakeWorld(int n, std::chrono::milliseconds timeout = std::chrono::seconds(20))
      : n_(n), timeout_(timeout), posted_(static_cast<std::size_t>(n)), calls_(static_cast<std::size_t>(n)),
        fail_after_(static_cast<std::size_t>(n), -1), done_count_(static_cast<std::size_t>(n), 0),
        posted_identity_(static_cast<std::size_t>(n), 0) {}

  int size() const { return n_; }
  std::chrono::milliseconds timeout() const { return timeout_; }
  // One identity per rank: every Collectives of rank r is "the same communicator".
  const void* identity(int r) const { return &posted_identity_[static_cast<std::size_t>(r)]; }
  void fail_rank(int r, int after) { fail_after_[static_cast<std::size_t>(r)] = after; }
  int collectives_done(int r) {
    std::lock_guard<std::mutex> lock(mu_);
    return done_count_[static_cast<std::size_t>(r)];
  }

  std::unique_ptr<Collectives> rank(int r);

  void run(int r, const Call& call) {
    std::unique_lock<std::mutex> lock(mu_);
    const auto ur = static_cast<std::size_t>(r);
    if (fail_after_[ur] >= 0 && done_count_[ur] >= fail_after_[ur]) {
      throw CommError("fake: link to rank " + std::to_string((r + 1) % n_) + " broke", (r + 1) % n_);
    }
    if (broken_) std::rethrow_exception(broken_);
    const int64_t gen = generation_;
    calls_[ur] = call;
    posted_[ur] = true;
    if (std::count(posted_.begin(), posted_.end(), true) == n_) {
      try {
        execute();
      } catch (...) {
        broken_ = std::current_exception();
      }
      std::fill(posted_.begin(), posted_.end(), false);
      ++generation_;
      cv_.notify_all();
    } else if (!cv_.wait_for(lock, timeout_, [&] { return generation_ != gen || broken_; })) {
      int missing = 0;
      while (missing < n_ && posted_[static_cast<std::size_t>(missing)]) ++missing;
      broken_ = std::make_exception_ptr(
          TimeoutError("fake: rank " + std::to_string(missing) + " did not join the collective", missing));
      cv_.notify_all();
    }
    if (broken_) std::rethrow_exception(broken_);
    ++done_count_[ur];
  }

 private:
  static double load(const void* p, std::size_t i, DataType t) {
    switch (t) {
      case DataType::kFloat32: return static_cast<const float*>(p)[i];
      case DataType::kFloat64: return static_cast<const double*>(p)[i];
      case DataType::kFloat16: return comm::half_to_float(static_cast<const uint16_t*>(p)[i]);
      case DataType::kInt64: return static_cast<double>(static_cast<const int64_t*>(p)[i]);
      case DataType::kInt32: return static_cast<const int32_t*>(p)[i];
      default: throw Error("fake: dtype not supported");
    }
  }
  static void store(void* p, std::size_t i, DataType t, double v) {
    switch (t) {
      case DataType::kFloat32: static_cast<float*>(p)[i] = static_cast<float>(v); break;
      case DataType::kFloat64: static_cast<double*>(p)[i] = v; break;
      case DataType::kFloat16: static_cast<uint16_t*>(p)[i] = comm::float_to_half(static_cast<float>(v)); break;
      case DataType::kInt64: static_cast<int64_t*>(p)[i] = static_cast<int64_t>(v); break;
      case DataType::kInt32: static_cast<int32_t*>(p)[i] = static_cast<int32_t>(v); break;
      default: throw Error("fake: dtype not supported");
    }
  }

  void execute() {
    const Call& c0 = calls_[0];
    for (int r = 1; r < n_; ++r) {
      const Call& c = calls_[static_cast<std::size_t>(r)];
      const bool same = c.kind == c0.kind && c.dtype == c0.dtype &&
                        (c.kind == Kind::kAllgatherv || c.count == c0.count) &&
                        (c.kind != Kind::kAllreduce || c.op == c0.op) && (c.kind != Kind::kBroadcast || c.root == c0.root);
      if (!same) {
        throw Error("fake: ranks 0 and " + std::to_string(r) + " issued different collectives (would deadlock)");
      }
    }
    const std::size_t es = dtype_size(c0.dtype);
    switch (c0.kind) {
      case Kind::kAllreduce: {
        std::vector<double> acc(c0.count);
        for (std::size_t i = 0; i < c0.count; ++i) {
          double a = load(calls_[0].recv, i, c0.dtype);
          for (int r = 1; r < n_; ++r) {
            const double v = load(calls_[static_cast<std::size_t>(r)].recv, i, c0.dtype);
            if (c0.op == comm::ReduceOp::kMin) a = std::min(a, v);
            else if (c0.op == comm::ReduceOp::kMax) a = std::max(a, v);
            else a += v;
          }
          if (c0.op == comm::ReduceOp::kAverage) a /= n_;
          acc[i] = a;
        }
        for (auto& c : calls_)
          for (std::size_t i = 0; i < c0.count; ++i) store(c.recv, i, c0.dtype, acc[i]);
        break;
      }
      case Kind::kBroadcast: {
        const void* src = calls_[static_cast<std::size_t>(c0.root)].recv;
        for (int r = 0; r < n_; ++r)
          if (r != c0.root) std::memcpy(calls_[static_cast<std::size_t>(r)].recv, src, c0.count * es);
        break;
      }
      case Kind::kAllgather:
        for (auto& dst : calls_)
          for (int r = 0; r < n_; ++r)
            std::memcpy(static_cast<char*>(dst.recv) + static_cast<std::size_t>(r) * c0.count * es,
                        calls_[static_cast<std::size_t>(r)].send, c0.count * es);
        break;
      case Kind::kAllgatherv:
        for (auto& dst : calls_) {
          dst.vcounts->clear();
          dst.vrecv->clear();
          for (auto& src : calls_) {
            dst.vcounts->push_back(src.count);
            const char* p = static_cast<const char*>(src.send);
            dst.vrecv->insert(dst.vrecv->end(), p, p + src.count * es);
          }
        }
        break;
    }
  }

  int n_;
  std::chrono::milliseconds timeout_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<bool> posted_;
  std::vector<Call> calls_;
  std::vector<int> fail_after_;
  std::vector<int> done_count_;
  int64_t generation_ = 0;
  std::exception_ptr broken_;
  std::vector<char> posted_identity_;
};

class FakeCollectives final : public Collectives {
 public:
  FakeCollectives(FakeWorld& world, int rank) : world_(world), rank_(rank) {}
  int rank() const override { return rank_; }
  int size() const override { return world_.size(); }
  std::chrono::milliseconds timeout() const override { return world_.timeout(); }
  const void* identity() const override { return world_.identity(rank_); }

  class DoneOp final : public PendingOp {
   public:
    void wait() override {}
    bool done() override { return true; }
  };

  std::unique_ptr<PendingOp> allreduce_async(void* data, std::size_t count, DataType dtype, comm::ReduceOp op,
                                             comm::Algorithm) override {
    FakeWorld::Call c;
    c.kind = FakeWorld::Kind::kAllreduce;
    c.recv = data;
    c.count = count;
    c.dtype = dtype;
    c.op = op;
    world_.run(rank_, c);
    return std::make_unique<DoneOp>();
  }
  void broadcast(void* data, std::size_t count, DataType dtype, int root) override {
    FakeWorld::Call c;
    c.kind = FakeWorld::Kind::kBroadcast;
    c.recv = data;
    c.count = count;
    c.dtype = dtype;
    c.root = root;
    world_.run(rank_, c);
  }
  void allgather(const void* send, std::size_t count, DataType dtype, void* recv) override {
    FakeWorld::Call c;
    c.kind = FakeWorld::Kind::kAllgather;
    c.send = send;
    c.recv = recv;
    c.count = count;
    c.dtype = dtype;
    world_.run(rank_, c);
  }
  void allgatherv(const void* send, std::size_t count, DataType dtype, std::vector<char>* recv,
                  std::vector<std::size_t>* counts) override {
    FakeWorld::Call c;
    c.kind = FakeWorld::Kind::kAllgatherv;
    c.send = send;
    c.count = count;
    c.dtype = dtype;
    c.vrecv = recv;
    c.vcounts = counts;
    world_.run(rank_, c);
  }

 private:
  FakeWorld& world_;
  int rank_;
};

inline std::unique_ptr<Collectives> FakeWorld::rank(int r) { return std::make_unique<FakeCollectives>(*this, r); }

}  // namespace muster::runtime::distributed::testing
