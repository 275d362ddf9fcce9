// The small-message engine (runtime/comm/shm/small_ops.h) with ranks on
// threads over one zeroed block of ordinary memory: every world size 1..5 x
// dtype x reduce op x size (flat, two-phase, and past the slot: pieces),
// broadcast from every root, allgather, ops larger than the slot (pieces),
// thousands of rounds back to back (the parity double-buffering),
// descriptor mismatches (the same MismatchError on every rank, then the next
// op works), and the failure paths on a fake clock (a silent peer times out
// naming it; a peer the monitor finds dead raises CommError naming it).
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "runtime/comm/half.h"
#include "runtime/comm/shm/small_ops.h"
#include "runtime/error.h"

namespace muster::runtime::comm::shm {
namespace {

// Zeroed, 64-byte aligned memory shared by the thread-ranks.
struct Area {
  explicit Area(std::size_t bytes) : bytes_(((bytes + 63) / 64) * 64) {
    p_ = std::aligned_alloc(64, bytes_);
    std::memset(p_, 0, bytes_);
  }
  ~Area() { std::free(p_); }
  void* p_;
  std::size_t bytes_;
};

struct World {
  World(int n, SmallOpsOptions options = {}, PeerMonitor* monitor = nullptr)
      : n(n), options(options), area(SmallOps::area_bytes(n, options.capacity)) {
    std::vector<int> world(static_cast<std::size_t>(n));
    for (int r = 0; r < n; ++r) world[static_cast<std::size_t>(r)] = r;
    for (int r = 0; r < n; ++r) ranks.push_back(std::make_unique<SmallOps>(SmallOpsArea{area.p_, n}, r, world, options, monitor));
  }
  // Runs body(rank) on one thread per rank; returns each rank's exception.
  std::vector<std::exception_ptr> run(const std::function<void(int)>& body) {
    std::vector<std::exception_ptr> errors(static_cast<std::size_t>(n));
    std::vector<std::thread> threads;
    for (int r = 0; r < n; ++r) {
      threads.emplace_back([&, r] {
        try {
          body(r);
        } catch (...) {
          errors[static_cast<std::size_t>(r)] = std::current_exception();
        }
      });
    }
    for (auto& t : threads) t.join();
    return errors;
  }
  void run_ok(const std::function<void(int)>& body) {
    for (auto& e : run(body)) {
      if (e) {
        try {
          std::rethrow_exception(e);
        } catch (const std::exception& x) {
          FAIL() << x.what();
        }
      }
    }
  }
  SmallOps& at(int r) { return *ranks[static_cast<std::size_t>(r)]; }

  int n;
  SmallOpsOptions options;
  Area area;
  std::vector<std::unique_ptr<SmallOps>> ranks;
};

OpDescriptor desc_of(OpKind kind, DataType dtype, std::size_t count, ReduceOp op = ReduceOp::kSum, int root = -1,
                     uint64_t seq = 1) {
  OpDescriptor d;
  d.kind = static_cast<uint8_t>(kind);
  d.dtype = static_cast<uint8_t>(dtype);
  d.reduce_op = kind == OpKind::kAllreduce ? static_cast<uint8_t>(static_cast<int>(op) + 1) : 0;
  d.root = root;
  d.count = count;
  d.seq = seq;
  return d;
}

// Element values as double, written to / read from any dtype.
void put(void* buf, std::size_t i, DataType t, double v) {
  switch (t) {
    case DataType::kFloat32: static_cast<float*>(buf)[i] = static_cast<float>(v); break;
    case DataType::kFloat64: static_cast<double*>(buf)[i] = v; break;
    case DataType::kFloat16: static_cast<uint16_t*>(buf)[i] = float_to_half(static_cast<float>(v)); break;
    case DataType::kBFloat16: static_cast<uint16_t*>(buf)[i] = float_to_bfloat16(static_cast<float>(v)); break;
    case DataType::kInt32: static_cast<int32_t*>(buf)[i] = static_cast<int32_t>(v); break;
    case DataType::kInt64: static_cast<int64_t*>(buf)[i] = static_cast<int64_t>(v); break;
  }
}
double get(const void* buf, std::size_t i, DataType t) {
  switch (t) {
    case DataType::kFloat32: return static_cast<const float*>(buf)[i];
    case DataType::kFloat64: return static_cast<const double*>(buf)[i];
    case DataType::kFloat16: return half_to_float(static_cast<const uint16_t*>(buf)[i]);
    case DataType::kBFloat16: return bfloat16_to_float(static_cast<const uint16_t*>(buf)[i]);
    case DataType::kInt32: return static_cast<const int32_t*>(buf)[i];
    case DataType::kInt64: return static_cast<double>(static_cast<const int64_t*>(buf)[i]);
  }
  return 0;
}

// Small integers: every sum is exact in every dtype (bfloat16 up to 256).
double value(int rank, std::size_t i) { return (rank + 1) + static_cast<double>(i % 5); }

// As a count: as many elements as the slot holds; three slots' worth and a
// ragged piece (four rounds).
constexpr std::size_t kFull = SIZE_MAX;
constexpr std::size_t kPieces = SIZE_MAX - 1;

class SmallAllreduce : public ::testing::TestWithParam<std::tuple<int, DataType, ReduceOp, std::size_t>> {};

TEST_P(SmallAllreduce, EveryRankGetsTheReduction) {
  const auto [n, dtype, op, count_or_max] = GetParam();
  SmallOpsOptions options;
  options.capacity = 64 * 1024;
  options.flat_max_bytes = 2 * 1024;
  options.pair_flat_max_bytes = 2 * 1024;  // two-phase at 2 ranks too
  const std::size_t esize = dtype_size(dtype);
  const std::size_t count = count_or_max == kFull     ? options.capacity / esize
                            : count_or_max == kPieces ? 3 * options.capacity / esize + 5
                                                      : count_or_max;
  World w(n, options);
  std::vector<std::vector<char>> data(static_cast<std::size_t>(n), std::vector<char>(count * esize + 1));
  for (int r = 0; r < n; ++r) {
    for (std::size_t i = 0; i < count; ++i) put(data[static_cast<std::size_t>(r)].data(), i, dtype, value(r, i));
  }
  w.run_ok([&](int r) {
    w.at(r).allreduce(data[static_cast<std::size_t>(r)].data(), count, dtype, op, desc_of(OpKind::kAllreduce, dtype, count, op));
  });
  for (std::size_t i = 0; i < count; ++i) {
    double want = value(0, i);
    for (int r = 1; r < n; ++r) {
      const double v = value(r, i);
      want = op == ReduceOp::kMin ? std::min(want, v) : op == ReduceOp::kMax ? std::max(want, v) : want + v;
    }
    if (op == ReduceOp::kAverage) want = dtype == DataType::kInt32 || dtype == DataType::kInt64 ? std::trunc(want / n) : want / n;
    const double got = get(data[0].data(), i, dtype);
    const double tolerance = dtype == DataType::kBFloat16 ? 0.01 * want : dtype == DataType::kFloat16 ? 0.001 * want : 1e-6 * want;
    ASSERT_NEAR(got, want, tolerance) << "element " << i << " of " << count;
  }
  for (int r = 1; r < n; ++r) {
    ASSERT_EQ(std::memcmp(data[0].data(), data[static_cast<std::size_t>(r)].data(), count * esize), 0)
        << "rank " << r << " holds other bits than rank 0";
  }
}

INSTANTIATE_TEST_SUITE_P(
    Sizes, SmallAllreduce,
    ::testing::Combine(::testing::Values(1, 2, 3, 4, 5),
                       ::testing::Values(DataType::kFloat32, DataType::kFloat64, DataType::kFloat16,
                                         DataType::kBFloat16, DataType::kInt32, DataType::kInt64),
                       ::testing::Values(ReduceOp::kSum, ReduceOp::kAverage, ReduceOp::kMin, ReduceOp::kMax),
                       // empty, one, flat, just past flat (two-phase, uneven chunks), the whole
                       // capacity, more than the capacity (pieces)
                       ::testing::Values(std::size_t{0}, std::size_t{1}, std::size_t{7}, std::size_t{300},
                                         std::size_t{1031}, kFull, kPieces)),
    [](const auto& info) {
      const int n = std::get<0>(info.param);
      const std::size_t count = std::get<3>(info.param);
      return "n" + std::to_string(n) + "_" + dtype_name(std::get<1>(info.param)) + "_" +
             reduce_op_name(std::get<2>(info.param)) + "_" +
             (count == kFull ? std::string("full") : count == kPieces ? std::string("pieces") : std::to_string(count)) +
             "_" + std::to_string(info.index);
    });

// Three or more ranks summing floats: every rank reduces the slots in rank
// order, so all hold the same bits even where float addition is not
// associative (random values make the orders differ).
TEST(SmallOpsTest, FlatFloatSumsAreBitIdenticalOnEveryRank) {
  for (int n : {3, 4, 5}) {
    World w(n);
    std::mt19937 gen(7);
    std::uniform_real_distribution<float> dist(-1e3f, 1e3f);
    const std::size_t count = 513;
    std::vector<std::vector<float>> data(static_cast<std::size_t>(n), std::vector<float>(count));
    for (auto& d : data) {
      for (auto& x : d) x = dist(gen);
    }
    w.run_ok([&](int r) {
      w.at(r).allreduce(data[static_cast<std::size_t>(r)].data(), count, DataType::kFloat32, ReduceOp::kSum,
                        desc_of(OpKind::kAllreduce, DataType::kFloat32, count));
    });
    for (int r = 1; r < n; ++r) {
      ASSERT_EQ(std::memcmp(data[0].data(), data[static_cast<std::size_t>(r)].data(), count * sizeof(float)), 0)
          << "n=" << n << " rank " << r;
    }
  }
}

// Two ranks with the default options: flat up to pair_flat_max_bytes (64 KB),
// two-phase above. Either way both ranks end with x0 + x1 (or its average,
// min, max) bit for bit, from random floats and doubles, at sizes on both
// sides of each limit.
TEST(SmallOpsTest, TwoRanksFlatAndTwoPhaseGiveTheSameBitsOnBoth) {
  SmallOpsOptions options;
  ASSERT_EQ(options.pair_flat_max_bytes, 64u * 1024);
  World w(2, options);
  std::mt19937_64 gen(11);
  std::uniform_real_distribution<double> dist(-1e6, 1e6);
  for (std::size_t bytes : {std::size_t{4096}, std::size_t{8200}, std::size_t{16384}, std::size_t{65536},
                            std::size_t{65536 + 8}, std::size_t{200000}, std::size_t{256 * 1024}}) {
    for (DataType dtype : {DataType::kFloat32, DataType::kFloat64}) {
      for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAverage, ReduceOp::kMin, ReduceOp::kMax}) {
        const std::size_t esize = dtype_size(dtype), count = bytes / esize;
        std::vector<std::vector<char>> data(2, std::vector<char>(count * esize));
        for (auto& d : data) {
          for (std::size_t i = 0; i < count; ++i) put(d.data(), i, dtype, dist(gen));
        }
        std::vector<double> want(count);
        for (std::size_t i = 0; i < count; ++i) {
          const double a = get(data[0].data(), i, dtype), b = get(data[1].data(), i, dtype);
          if (dtype == DataType::kFloat32) {
            const float s = static_cast<float>(a) + static_cast<float>(b);
            want[i] = op == ReduceOp::kSum       ? s
                      : op == ReduceOp::kAverage ? s / 2.0f
                      : op == ReduceOp::kMin     ? std::min(a, b)
                                                 : std::max(a, b);
          } else {
            want[i] = op == ReduceOp::kSum       ? a + b
                      : op == ReduceOp::kAverage ? (a + b) / 2.0
                      : op == ReduceOp::kMin     ? std::min(a, b)
                                                 : std::max(a, b);
          }
        }
        w.run_ok([&](int r) {
          w.at(r).allreduce(data[static_cast<std::size_t>(r)].data(), count, dtype, op,
                            desc_of(OpKind::kAllreduce, dtype, count, op));
        });
        for (int r = 0; r < 2; ++r) {
          for (std::size_t i = 0; i < count; ++i) {
            ASSERT_EQ(get(data[static_cast<std::size_t>(r)].data(), i, dtype), want[i])
                << bytes << " bytes, " << dtype_name(dtype) << ", op " << static_cast<int>(op) << ", rank " << r
                << ", element " << i;
          }
        }
      }
    }
  }
}

TEST(SmallOpsTest, BroadcastFromEveryRoot) {
  for (int n : {1, 2, 3, 5}) {
    World w(n);
    for (int root = 0; root < n; ++root) {
      for (std::size_t count : {std::size_t{0}, std::size_t{1}, std::size_t{4099}}) {
        std::vector<std::vector<int64_t>> data(static_cast<std::size_t>(n), std::vector<int64_t>(count));
        for (int r = 0; r < n; ++r) {
          for (std::size_t i = 0; i < count; ++i) data[static_cast<std::size_t>(r)][i] = r * 1000000 + static_cast<int64_t>(i);
        }
        w.run_ok([&](int r) {
          w.at(r).broadcast(data[static_cast<std::size_t>(r)].data(), count, DataType::kInt64, root,
                            desc_of(OpKind::kBroadcast, DataType::kInt64, count, ReduceOp::kSum, root));
        });
        for (int r = 0; r < n; ++r) ASSERT_EQ(data[static_cast<std::size_t>(r)], data[static_cast<std::size_t>(root)]) << "n=" << n << " root " << root;
        for (std::size_t i = 0; i < count; ++i) ASSERT_EQ(data[0][i], root * 1000000 + static_cast<int64_t>(i));
      }
    }
  }
}

TEST(SmallOpsTest, AllgatherPutsRankBlocksInOrder) {
  for (int n : {1, 2, 3, 4}) {
    World w(n);
    const std::size_t count = 777;
    std::vector<std::vector<int32_t>> send(static_cast<std::size_t>(n)), recv(static_cast<std::size_t>(n));
    for (int r = 0; r < n; ++r) {
      for (std::size_t i = 0; i < count; ++i) send[static_cast<std::size_t>(r)].push_back(r * 10000 + static_cast<int32_t>(i));
      recv[static_cast<std::size_t>(r)].assign(count * static_cast<std::size_t>(n), -1);
    }
    w.run_ok([&](int r) {
      w.at(r).allgather(send[static_cast<std::size_t>(r)].data(), count, DataType::kInt32, recv[static_cast<std::size_t>(r)].data(),
                        desc_of(OpKind::kAllgather, DataType::kInt32, count));
    });
    for (int r = 0; r < n; ++r) {
      for (int p = 0; p < n; ++p) {
        for (std::size_t i = 0; i < count; ++i) {
          ASSERT_EQ(recv[static_cast<std::size_t>(r)][static_cast<std::size_t>(p) * count + i], p * 10000 + static_cast<int32_t>(i));
        }
      }
    }
  }
}

// Rounds back to back, every kind mixed, values changing each round: a rank
// that overwrote a slot a peer still reads (the parity rule broken) shows up
// as a wrong value. With spin 0 as well, so most waits sleep on the doorbell.
void many_rounds(int n, std::chrono::microseconds spin, int rounds) {
  SmallOpsOptions options;
  options.capacity = 16 * 1024;
  options.flat_max_bytes = 1024;
  options.pair_flat_max_bytes = 1024;  // two-phase at 2 ranks too
  options.spin = spin;
  World w(n, options);
  w.run_ok([&](int r) {
    std::vector<float> buf(2048);
    std::vector<float> gathered(16 * static_cast<std::size_t>(n));
    for (int k = 0; k < rounds; ++k) {
      const int kind = k % 4;
      const std::size_t count = kind == 0 ? 16 : kind == 1 ? 2048 : 16;
      for (std::size_t i = 0; i < count; ++i) buf[i] = static_cast<float>(k + r + static_cast<int>(i % 3));
      SmallOps& ops = w.at(r);
      const uint64_t seq = static_cast<uint64_t>(k) + 1;
      if (kind <= 1) {
        ops.allreduce(buf.data(), count, DataType::kFloat32, ReduceOp::kSum,
                      desc_of(OpKind::kAllreduce, DataType::kFloat32, count, ReduceOp::kSum, -1, seq));
        for (std::size_t i = 0; i < count; ++i) {
          const float want = static_cast<float>(n * (k + static_cast<int>(i % 3)) + n * (n - 1) / 2);
          if (buf[i] != want) throw Error("round " + std::to_string(k) + " element " + std::to_string(i) + ": " + std::to_string(buf[i]) + " != " + std::to_string(want));
        }
      } else if (kind == 2) {
        const int root = k % n;
        ops.broadcast(buf.data(), count, DataType::kFloat32, root,
                      desc_of(OpKind::kBroadcast, DataType::kFloat32, count, ReduceOp::kSum, root, seq));
        if (buf[1] != static_cast<float>(k + root + 1)) throw Error("broadcast round " + std::to_string(k));
      } else {
        ops.allgather(buf.data(), count, DataType::kFloat32, gathered.data(),
                      desc_of(OpKind::kAllgather, DataType::kFloat32, count, ReduceOp::kSum, -1, seq));
        for (int p = 0; p < n; ++p) {
          if (gathered[static_cast<std::size_t>(p) * count + 2] != static_cast<float>(k + p + 2)) throw Error("allgather round " + std::to_string(k));
        }
      }
    }
  });
}

TEST(SmallOpsTest, ThousandsOfRoundsBackToBack) {
  many_rounds(2, std::chrono::microseconds(50), 5000);
  many_rounds(3, std::chrono::microseconds(5), 2000);
  many_rounds(5, std::chrono::microseconds(0), 1000);
}

TEST(SmallOpsTest, RoundsThatSleepOnTheDoorbell) {
  many_rounds(2, std::chrono::microseconds(0), 3000);
  many_rounds(4, std::chrono::microseconds(0), 1000);
}

// Ranks that disagree: every rank throws the same MismatchError naming the
// rank and field (and the ops' names), before any data moved; the next op
// runs normally.
TEST(SmallOpsTest, MismatchSameErrorEverywhereThenUsable) {
  const int n = 3;
  World w(n);
  struct Variant {
    const char* what;
    std::function<void(SmallOps&, int, std::vector<float>&)> op;
  };
  const std::string loss = "loss", grad = "grad";
  const std::vector<Variant> variants = {
      {"count", [](SmallOps& ops, int r, std::vector<float>& b) {
         const std::size_t count = r == 1 ? 5 : 4;
         ops.allreduce(b.data(), count, DataType::kFloat32, ReduceOp::kSum, desc_of(OpKind::kAllreduce, DataType::kFloat32, count));
       }},
      {"reduce op", [](SmallOps& ops, int r, std::vector<float>& b) {
         const ReduceOp op = r == 2 ? ReduceOp::kMax : ReduceOp::kSum;
         ops.allreduce(b.data(), 4, DataType::kFloat32, op, desc_of(OpKind::kAllreduce, DataType::kFloat32, 4, op));
       }},
      {"op", [](SmallOps& ops, int r, std::vector<float>& b) {
         if (r == 1) ops.barrier(desc_of(OpKind::kBarrier, DataType::kFloat32, 0));
         else ops.allreduce(b.data(), 4, DataType::kFloat32, ReduceOp::kSum, desc_of(OpKind::kAllreduce, DataType::kFloat32, 4));
       }},
      {"root", [](SmallOps& ops, int r, std::vector<float>& b) {
         const int root = r == 0 ? 1 : 0;
         ops.broadcast(b.data(), 4, DataType::kFloat32, root, desc_of(OpKind::kBroadcast, DataType::kFloat32, 4, ReduceOp::kSum, root));
       }},
      {"'grad'", [&](SmallOps& ops, int r, std::vector<float>& b) {
         const std::string& name = r == 2 ? grad : loss;
         OpDescriptor d = desc_of(OpKind::kAllreduce, DataType::kFloat32, 4);
         d.name_hash = op_name_hash(name);
         ops.allreduce(b.data(), 4, DataType::kFloat32, ReduceOp::kSum, d, &name);
       }},
  };
  for (const auto& v : variants) {
    std::vector<std::vector<float>> bufs(n, std::vector<float>(8, 1.0f));
    std::vector<std::string> messages(n);
    const auto errors = w.run([&](int r) {
      try {
        v.op(w.at(r), r, bufs[static_cast<std::size_t>(r)]);
      } catch (const MismatchError& e) {
        messages[static_cast<std::size_t>(r)] = e.what();
      }
    });
    for (int r = 0; r < n; ++r) {
      ASSERT_FALSE(errors[static_cast<std::size_t>(r)]) << v.what;
      EXPECT_FALSE(messages[static_cast<std::size_t>(r)].empty()) << v.what << ": rank " << r << " did not throw";
      EXPECT_EQ(messages[static_cast<std::size_t>(r)], messages[0]) << v.what;
      EXPECT_NE(messages[0].find(v.what), std::string::npos) << messages[0];
      // No data moved: every buffer is as it was.
      EXPECT_EQ(bufs[static_cast<std::size_t>(r)], std::vector<float>(8, 1.0f)) << v.what;
    }
    // And the world is still usable.
    w.run_ok([&](int r) {
      std::vector<float> b(3, static_cast<float>(r));
      w.at(r).allreduce(b.data(), 3, DataType::kFloat32, ReduceOp::kSum, desc_of(OpKind::kAllreduce, DataType::kFloat32, 3));
      if (b[2] != 3.0f) throw Error("after the mismatch: " + std::to_string(b[2]));
    });
  }
}

// The bare round: every rank's descriptor and payload (sizes may differ),
// nothing compared; ops before and after it stay in step.
TEST(SmallOpsTest, ExchangeReturnsEveryRanksRecord) {
  const int n = 4;
  World w(n);
  w.run_ok([&](int r) {
    SmallOps& ops = w.at(r);
    for (int round = 0; round < 50; ++round) {
      std::string mine(static_cast<std::size_t>(r + round % 3), static_cast<char>('a' + r));
      OpDescriptor d = desc_of(OpKind::kAlltoall, DataType::kInt64, static_cast<std::size_t>(r), ReduceOp::kSum, -1, 7);
      const auto& records = ops.exchange(d, mine.data(), mine.size(), nullptr);
      if (records.size() != static_cast<std::size_t>(n)) throw Error("records");
      for (int p = 0; p < n; ++p) {
        const auto& rec = records[static_cast<std::size_t>(p)];
        const std::string want(static_cast<std::size_t>(p + round % 3), static_cast<char>('a' + p));
        if (rec.desc.count != static_cast<uint64_t>(p) || std::string(rec.payload, rec.bytes) != want) {
          throw Error("round " + std::to_string(round) + ": rank " + std::to_string(p) + "'s record");
        }
      }
      float x = 1.0f;
      ops.allreduce(&x, 1, DataType::kFloat32, ReduceOp::kSum, desc_of(OpKind::kAllreduce, DataType::kFloat32, 1));
      if (x != static_cast<float>(n)) throw Error("allreduce after the exchange");
    }
  });
  std::vector<char> big(w.options.capacity + 1);
  EXPECT_THROW(w.at(0).exchange(desc_of(OpKind::kBarrier, DataType::kFloat32, 0), big.data(), big.size(), nullptr),
               InvalidArgument);
}

// An op larger than the slot runs as one round per piece; every rank ends
// with the same bits (random floats, 3 and 4 ranks: only one rank reduces
// each chunk of each piece), broadcast and allgather land whole, and a
// mismatch is caught in the first round, before any byte moved.
TEST(SmallOpsTest, LargerThanTheSlotRunsInPieces) {
  SmallOpsOptions options;
  options.capacity = 4096;
  options.flat_max_bytes = 512;
  options.pair_flat_max_bytes = 512;  // two-phase at 2 ranks too
  for (int n : {2, 3, 4}) {
    World w(n, options);
    const std::size_t count = 3 * 1024 + 100;  // 4 pieces of float32, the last ragged
    std::mt19937 gen(11);
    std::uniform_real_distribution<float> dist(-1e3f, 1e3f);
    std::vector<std::vector<float>> data(static_cast<std::size_t>(n), std::vector<float>(count));
    for (auto& d : data) {
      for (auto& x : d) x = dist(gen);
    }
    std::vector<double> want(count, 0.0);
    for (const auto& d : data) {
      for (std::size_t i = 0; i < count; ++i) want[i] += d[i];
    }
    std::vector<std::vector<int64_t>> bcast(static_cast<std::size_t>(n), std::vector<int64_t>(1500));
    std::vector<std::vector<float>> gathered(static_cast<std::size_t>(n), std::vector<float>(count * static_cast<std::size_t>(n)));
    const int root = n - 1;
    w.run_ok([&](int r) {
      auto& mine = data[static_cast<std::size_t>(r)];
      w.at(r).allreduce(mine.data(), count, DataType::kFloat32, ReduceOp::kSum,
                        desc_of(OpKind::kAllreduce, DataType::kFloat32, count));
      auto& b = bcast[static_cast<std::size_t>(r)];
      for (std::size_t i = 0; i < b.size(); ++i) b[i] = r == root ? static_cast<int64_t>(i * 7 + 3) : -1;
      w.at(r).broadcast(b.data(), b.size(), DataType::kInt64, root,
                        desc_of(OpKind::kBroadcast, DataType::kInt64, b.size(), ReduceOp::kSum, root));
      std::vector<float> send(count);
      for (std::size_t i = 0; i < count; ++i) send[i] = static_cast<float>(r * 100000 + static_cast<int>(i));
      w.at(r).allgather(send.data(), count, DataType::kFloat32, gathered[static_cast<std::size_t>(r)].data(),
                        desc_of(OpKind::kAllgather, DataType::kFloat32, count));
    });
    for (std::size_t i = 0; i < count; ++i) ASSERT_NEAR(data[0][i], want[i], 1e-3) << "n=" << n << " element " << i;
    for (int r = 1; r < n; ++r) {
      ASSERT_EQ(std::memcmp(data[0].data(), data[static_cast<std::size_t>(r)].data(), count * sizeof(float)), 0)
          << "n=" << n << ": rank " << r << " holds other bits than rank 0";
    }
    for (int r = 0; r < n; ++r) {
      for (std::size_t i = 0; i < 1500; ++i) {
        ASSERT_EQ(bcast[static_cast<std::size_t>(r)][i], static_cast<int64_t>(i * 7 + 3)) << "broadcast, rank " << r;
      }
      for (int p = 0; p < n; ++p) {
        for (std::size_t i = 0; i < count; i += 97) {
          ASSERT_EQ(gathered[static_cast<std::size_t>(r)][static_cast<std::size_t>(p) * count + i],
                    static_cast<float>(p * 100000 + static_cast<int>(i)))
              << "allgather, rank " << r << ", block " << p << ", element " << i;
        }
      }
    }
  }
  // 1 rank: 4 rounds, the data untouched (the sum of one).
  World one(1, options);
  std::vector<float> b(3 * 1024 + 1, 2.5f);
  one.at(0).allreduce(b.data(), b.size(), DataType::kFloat32, ReduceOp::kSum,
                      desc_of(OpKind::kAllreduce, DataType::kFloat32, b.size()));
  EXPECT_EQ(one.at(0).rounds(), 4u);
  EXPECT_EQ(b.back(), 2.5f);
  // Null buffer: refused, nothing published.
  EXPECT_THROW(one.at(0).allreduce(nullptr, 5, DataType::kFloat32, ReduceOp::kSum,
                                   desc_of(OpKind::kAllreduce, DataType::kFloat32, 5)),
               InvalidArgument);
  EXPECT_EQ(one.at(0).rounds(), 4u);
}

TEST(SmallOpsTest, PiecedOpsThatDisagreeFailBeforeAnyByteMoved) {
  SmallOpsOptions options;
  options.capacity = 4096;
  const int n = 3;
  World w(n, options);
  const std::size_t count = 5000;
  std::vector<std::vector<float>> data(n, std::vector<float>(count + 10));
  for (int r = 0; r < n; ++r) std::fill(data[static_cast<std::size_t>(r)].begin(), data[static_cast<std::size_t>(r)].end(), static_cast<float>(r + 1));
  auto errors = w.run([&](int r) {
    // Rank 2 reduces 10 more elements than the others.
    const std::size_t c = r == 2 ? count + 10 : count;
    w.at(r).allreduce(data[static_cast<std::size_t>(r)].data(), c, DataType::kFloat32, ReduceOp::kSum,
                      desc_of(OpKind::kAllreduce, DataType::kFloat32, c));
  });
  std::string first;
  for (int r = 0; r < n; ++r) {
    ASSERT_TRUE(errors[static_cast<std::size_t>(r)]) << "rank " << r << " did not fail";
    try {
      std::rethrow_exception(errors[static_cast<std::size_t>(r)]);
    } catch (const MismatchError& e) {
      if (r == 0) first = e.what();
      EXPECT_EQ(first, e.what()) << "rank " << r;
      EXPECT_NE(std::string(e.what()).find("count"), std::string::npos) << e.what();
    }
    for (float x : data[static_cast<std::size_t>(r)]) ASSERT_EQ(x, static_cast<float>(r + 1)) << "rank " << r << "'s data moved";
  }
  // Usable afterwards, in pieces.
  w.run_ok([&](int r) {
    w.at(r).allreduce(data[static_cast<std::size_t>(r)].data(), count, DataType::kFloat32, ReduceOp::kSum,
                      desc_of(OpKind::kAllreduce, DataType::kFloat32, count));
    if (data[static_cast<std::size_t>(r)][count - 1] != 6.0f) throw Error("the op after the mismatch");
  });
}

// A fake clock: every reading is 1 ms later than the one before.
std::atomic<int64_t> fake_ms{0};
Watchdog::Clock::time_point fake_now() { return Watchdog::Clock::time_point(std::chrono::milliseconds(++fake_ms)); }

// Blames a fixed rank; says `dead` has exited once `dead_after` checks passed.
class FakeMonitor : public PeerMonitor {
 public:
  FakeMonitor(int blamed, int dead) : blamed_(blamed), dead_(dead) {}
  void begin_op(uint64_t) override {}
  void heartbeat() override {}
  void check_alive(const std::string& what) override {
    ++checks;
    if (dead_ >= 0) throw CommError(what + ": rank " + std::to_string(dead_) + " has exited", dead_);
  }
  void record_failure(int) override {}
  int blame(uint64_t, std::chrono::milliseconds, std::string* why) override {
    *why = "rank " + std::to_string(blamed_) + " has not started the op";
    return blamed_;
  }
  std::atomic<int> checks{0};

 private:
  int blamed_, dead_;
};

TEST(SmallOpsTest, SilentPeerTimesOutNamingIt) {
  SmallOpsOptions options;
  options.timeout = std::chrono::milliseconds(300);
  options.now = &fake_now;
  FakeMonitor monitor(2, -1);
  World w(3, options, &monitor);
  // Ranks 0 and 1 enter the op; rank 2 never does.
  const auto errors = w.run([&](int r) {
    if (r == 2) return;
    std::vector<float> b(4);
    w.at(r).allreduce(b.data(), 4, DataType::kFloat32, ReduceOp::kSum, desc_of(OpKind::kAllreduce, DataType::kFloat32, 4, ReduceOp::kSum, -1, 9));
  });
  for (int r = 0; r < 2; ++r) {
    try {
      std::rethrow_exception(errors[static_cast<std::size_t>(r)]);
    } catch (const TimeoutError& e) {
      EXPECT_EQ(e.rank(), 2);
      EXPECT_NE(std::string(e.what()).find("allreduce #9"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("rank 2 did not make progress within 300 ms"), std::string::npos) << e.what();
    } catch (...) {
      ADD_FAILURE() << "rank " << r << ": not a TimeoutError";
    }
  }
}

TEST(SmallOpsTest, DeadPeerRaisesCommErrorNamingIt) {
  SmallOpsOptions options;
  options.timeout = std::chrono::milliseconds(60000);
  options.now = &fake_now;
  FakeMonitor monitor(1, 1);
  World w(2, options, &monitor);
  try {
    std::vector<float> b(4);
    w.at(0).barrier(desc_of(OpKind::kBarrier, DataType::kFloat32, 0, ReduceOp::kSum, -1, 3));
    FAIL() << "the barrier finished without its peer";
  } catch (const TimeoutError& e) {
    FAIL() << "timed out instead of noticing the dead peer: " << e.what();
  } catch (const CommError& e) {
    EXPECT_EQ(e.rank(), 1);
    EXPECT_NE(std::string(e.what()).find("barrier #3"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("rank 1 has exited"), std::string::npos) << e.what();
  }
  EXPECT_GE(monitor.checks.load(), 1);
}

}  // namespace
}  // namespace muster::runtime::comm::shm
