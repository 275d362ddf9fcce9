// The ring algorithm with in-process ranks on threads, joined by in-memory
// links: every world size 1..5 and uneven counts, plus the watchdog (on a
// fake clock): a silent peer makes the ring throw TimeoutError naming it
// once the timeout has passed.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "runtime/comm/ring_allreduce.h"

namespace muster::runtime::comm {
namespace {

// A bounded FIFO of segments between two threads.
struct Pipe {
  std::mutex mu;
  std::deque<std::vector<char>> q;
  std::vector<char> current;
};

class PipeSend : public SendLink {
 public:
  PipeSend(Pipe* p, int peer) : p_(p), peer_(peer) {}
  bool try_send(const void* src, std::size_t bytes) override {
    std::lock_guard<std::mutex> lock(p_->mu);
    if (p_->q.size() >= 3) return false;
    p_->q.emplace_back(static_cast<const char*>(src), static_cast<const char*>(src) + bytes);
    return true;
  }
  bool flushed() override { return true; }
  int peer() const override { return peer_; }

 private:
  Pipe* p_;
  int peer_;
};

class PipeRecv : public RecvLink {
 public:
  PipeRecv(Pipe* p, int peer) : p_(p), peer_(peer) {}
  void expect(std::size_t) override {}
  const void* try_recv() override {
    std::lock_guard<std::mutex> lock(p_->mu);
    if (p_->q.empty()) return nullptr;
    return p_->q.front().data();
  }
  void release() override {
    std::lock_guard<std::mutex> lock(p_->mu);
    p_->q.pop_front();
  }
  int peer() const override { return peer_; }

 private:
  Pipe* p_;
  int peer_;
};

// An n-rank ring, a thread per rank, over pipes[r] (rank r -> rank r+1)
// through links S and R; every rank's result checked against the reduction
// of all ranks' inputs.
template <class S, class R, class P>
void run_ring_over(std::vector<P>& pipes, std::size_t count, ReduceOp op, std::size_t segment_bytes,
                   std::size_t block_bytes, const char* what) {
  const int n = static_cast<int>(pipes.size());
  const auto input = [](int rank, std::size_t i) { return (rank + 1) * 1000.0 + static_cast<double>(i % 97); };
  std::vector<std::vector<double>> data(static_cast<std::size_t>(n));
  for (int r = 0; r < n; ++r) {
    for (std::size_t i = 0; i < count; ++i) data[static_cast<std::size_t>(r)].push_back(input(r, i));
  }
  std::vector<std::thread> threads;
  std::vector<std::exception_ptr> errors(static_cast<std::size_t>(n));
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      try {
        S send(&pipes[static_cast<std::size_t>(r)], (r + 1) % n);
        R recv(&pipes[static_cast<std::size_t>((r + n - 1) % n)], (r + n - 1) % n);
        Watchdog watchdog(std::chrono::seconds(20), nullptr, 1, what);
        RingContext ctx{r, n, segment_bytes, block_bytes};
        ring_allreduce(data[static_cast<std::size_t>(r)].data(), count, DataType::kFloat64, op, ctx, send, recv,
                       watchdog);
      } catch (...) {
        errors[static_cast<std::size_t>(r)] = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (auto& e : errors) ASSERT_FALSE(e);
  for (int r = 0; r < n; ++r) {
    for (std::size_t i = 0; i < count; ++i) {
      double want = 0;
      for (int k = 0; k < n; ++k) {
        const double v = input(k, i);
        want = k == 0 ? v : op == ReduceOp::kMax ? std::max(want, v) : want + v;
      }
      if (op == ReduceOp::kAverage) want /= n;
      ASSERT_EQ(data[static_cast<std::size_t>(r)][i], want) << what << " n=" << n << " rank " << r << " i=" << i;
    }
  }
}

void run_ring(int n, std::size_t count, ReduceOp op, std::size_t segment_bytes, std::size_t block_bytes = 0) {
  std::vector<Pipe> pipes(static_cast<std::size_t>(n));
  run_ring_over<PipeSend, PipeRecv>(pipes, count, op, segment_bytes, block_bytes, "test ring");
}

TEST(RingAllreduceTest, WorldSizesOneToFiveUnevenCounts) {
  for (int n = 1; n <= 5; ++n) {
    for (std::size_t count : {std::size_t{0}, std::size_t{1}, std::size_t{4}, std::size_t{13}, std::size_t{10007}}) {
      run_ring(n, count, ReduceOp::kSum, 64 * 8);
    }
  }
}

TEST(RingAllreduceTest, AverageAndMaxWithTinySegments) {
  run_ring(3, 1001, ReduceOp::kAverage, 64);
  run_ring(4, 1001, ReduceOp::kMax, 8);  // one element per segment
}

// Blocks: a block size that is no multiple of the rank count or the segment
// (10007 = 12 * 833 + 11: a short last block), averages divided once per
// element across blocks, and blocks asked smaller than one element per rank
// (rounded up to n elements; 13 elements leave a last block shorter than n).
TEST(RingAllreduceTest, BlocksOfUnevenSizes) {
  for (int n = 2; n <= 5; ++n) {
    run_ring(n, 10007, ReduceOp::kSum, 64 * 8, 833 * 8);
    run_ring(n, 1001, ReduceOp::kAverage, 64, 100 * 8);
    run_ring(n, 13, ReduceOp::kMax, 64, 8);  // one element per block -> n elements
  }
}

// An inline all-TCP ring's block from its round trip: 256 KB a rank within
// [1 MB, 4 MB] up to 100 us, 4 MB beyond it or when no rank could say.
TEST(RingAllreduceTest, InlineTcpBlockFollowsTheRoundTrip) {
  constexpr std::size_t kMB = 1u << 20;
  EXPECT_EQ(tcp_inline_block_bytes(17, 2), kMB);
  EXPECT_EQ(tcp_inline_block_bytes(23, 4), kMB);
  EXPECT_EQ(tcp_inline_block_bytes(100, 8), 2 * kMB);
  EXPECT_EQ(tcp_inline_block_bytes(40, 64), 4 * kMB);
  EXPECT_EQ(tcp_inline_block_bytes(101, 2), 4 * kMB);
  EXPECT_EQ(tcp_inline_block_bytes(205, 4), 4 * kMB);
  EXPECT_EQ(tcp_inline_block_bytes(0, 2), 4 * kMB);  // unknown
}

// Links that keep the contract's letter the way TCP does: a send queues a
// pointer, read only when the segment is delivered (checked against what
// it held when sent: a ring that changes a source before flushed() fails
// here), and every announced segment that is in is delivered at once,
// straight into its expect_into() memory, as TCP's I/O threads do, not
// only the oldest: the ring must neither change a chunk it has sent before
// the link lets go of it nor announce memory it still reads or reduces.
struct LazyPipe {
  struct Entry {
    const char* src;
    std::vector<char> at_send;
    std::vector<char> staged;
    bool delivered = false;
  };
  std::mutex mu;
  std::deque<Entry> q;
  std::atomic<int> overwritten{0};
};

class LazySend : public SendLink {
 public:
  LazySend(LazyPipe* p, int peer) : p_(p), peer_(peer) {}
  bool try_send(const void* src, std::size_t bytes) override {
    std::lock_guard<std::mutex> lock(p_->mu);
    if (p_->q.size() >= 6) return false;
    const char* s = static_cast<const char*>(src);
    p_->q.push_back({s, std::vector<char>(s, s + bytes), {}, false});
    return true;
  }
  bool flushed() override {
    std::lock_guard<std::mutex> lock(p_->mu);
    return std::all_of(p_->q.begin(), p_->q.end(), [](const LazyPipe::Entry& e) { return e.delivered; });
  }
  int peer() const override { return peer_; }

 private:
  LazyPipe* p_;
  int peer_;
};

class LazyRecv : public RecvLink {
 public:
  LazyRecv(LazyPipe* p, int peer) : p_(p), peer_(peer) {}
  void expect(std::size_t bytes) override { expect_into(nullptr, bytes); }
  void expect_into(void* dst, std::size_t bytes) override { expected_.push_back({static_cast<char*>(dst), bytes}); }
  const void* try_recv() override {
    std::lock_guard<std::mutex> lock(p_->mu);
    for (std::size_t i = 0; i < std::min(p_->q.size(), expected_.size()); ++i) {
      LazyPipe::Entry& e = p_->q[i];
      if (e.delivered) continue;
      const std::size_t bytes = e.at_send.size();
      EXPECT_EQ(bytes, expected_[i].second) << "segment sizes disagree";
      if (std::memcmp(e.src, e.at_send.data(), bytes) != 0) ++p_->overwritten;
      if (expected_[i].first != nullptr) {
        std::memcpy(expected_[i].first, e.src, bytes);
      } else {
        e.staged.assign(e.src, e.src + bytes);
      }
      e.delivered = true;
    }
    if (p_->q.empty() || expected_.empty()) return nullptr;
    return expected_.front().first != nullptr ? static_cast<const void*>(expected_.front().first)
                                              : p_->q.front().staged.data();
  }
  void release() override {
    std::lock_guard<std::mutex> lock(p_->mu);
    p_->q.pop_front();
    expected_.pop_front();
  }
  int peer() const override { return peer_; }

 private:
  LazyPipe* p_;
  int peer_;
  std::deque<std::pair<char*, std::size_t>> expected_;
};

void run_lazy_ring(int n, std::size_t count, ReduceOp op, std::size_t segment_bytes, std::size_t block_bytes) {
  std::vector<LazyPipe> pipes(static_cast<std::size_t>(n));
  run_ring_over<LazySend, LazyRecv>(pipes, count, op, segment_bytes, block_bytes, "lazy ring");
  for (auto& p : pipes) EXPECT_EQ(p.overwritten.load(), 0) << "n=" << n << ": a source changed before it was sent";
}

TEST(RingAllreduceTest, ZeroCopyLinksDeliveringEagerlySeeConsistentMemory) {
  for (int n = 2; n <= 5; ++n) {
    run_lazy_ring(n, 10007, ReduceOp::kSum, 64 * 8, 833 * 8);  // many blocks, short last one
    run_lazy_ring(n, 4099, ReduceOp::kAverage, 8 * 8, 0);      // one block, many segments per chunk
    run_lazy_ring(n, 3, ReduceOp::kSum, 64, 0);                // empty chunks
  }
}

// A fake clock: every reading is 1 ms later than the one before.
std::chrono::steady_clock::time_point fake_now() {
  static std::chrono::steady_clock::time_point t{};
  t += std::chrono::milliseconds(1);
  return t;
}

TEST(RingAllreduceTest, SilentPeerTimesOutNamingIt) {
  Pipe to_peer, from_peer;
  PipeSend send(&to_peer, 1);
  PipeRecv recv(&from_peer, 1);
  Watchdog watchdog(std::chrono::milliseconds(300), nullptr, 4, "allreduce #4", &fake_now);
  std::vector<double> data(100000, 1.0);
  RingContext ctx{0, 2, 4096};
  const auto start = fake_now();
  try {
    ring_allreduce(data.data(), data.size(), DataType::kFloat64, ReduceOp::kSum, ctx, send, recv, watchdog);
    FAIL() << "ring finished without its peer";
  } catch (const TimeoutError& e) {
    EXPECT_EQ(e.rank(), 1);
    EXPECT_NE(std::string(e.what()).find("rank 1 did not make progress within 300 ms"), std::string::npos) << e.what();
  }
  // It gave up once 300 fake milliseconds had passed without progress, not before.
  const auto waited = fake_now() - start;
  EXPECT_GE(waited, std::chrono::milliseconds(300));
  EXPECT_LT(waited, std::chrono::milliseconds(400));
}

}  // namespace
}  // namespace muster::runtime::comm
