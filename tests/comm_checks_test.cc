// Checked ops, process sets and broken worlds, with ranks on threads over an
// in-process store (shm, tcp and two-host variants):
// - ranks that ask for different things (count, dtype, root, op, reduce op,
//   name, shape, counts per rank, arguments one rank refuses) all get the
//   same MismatchError naming the ranks and fields, never garbage or a
//   watchdog timeout, and the next op works;
// - split: members get a working world of their own, the others null; its
//   ops interleave with the parent's; it can be destroyed and made again;
// - a stalled or departed peer breaks the world with an error naming it; a
//   broken world is destroyed promptly, leaves no threads, descriptors or
//   shared-memory objects, and a new one forms in the same process.
#include <dirent.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "comm_reference.h"
#include "comm_thread_world.h"

namespace muster::runtime::comm {
namespace {

using namespace testing::reference;
using testing::run_world;
using testing::run_world_collect;
using testing::what;

using World = std::tuple<std::string, int>;

class CheckedOpsTest : public ::testing::TestWithParam<World> {};

// Runs `op` on every rank; every rank must throw MismatchError (or, where
// `refuser` >= 0, that rank InvalidArgument), all with the same message
// (the refuser's aside) containing every string of `needles`. Then an
// allreduce must give the right sum: the world is still usable.
void expect_mismatch(int n, const std::string& variant, const std::function<void(int, Communicator&)>& op,
                     const std::vector<std::string>& needles, int refuser = -1) {
  std::vector<std::string> messages(static_cast<std::size_t>(n));
  run_world(n, variant, [&](int rank, Communicator& comm) {
    try {
      op(rank, comm);
      ADD_FAILURE() << "rank " << rank << ": no error";
    } catch (const MismatchError& e) {
      EXPECT_NE(rank, refuser) << e.what();
      messages[static_cast<std::size_t>(rank)] = e.what();
    } catch (const InvalidArgument& e) {
      EXPECT_EQ(rank, refuser) << e.what();
    }
    for (int round = 0; round < 2; ++round) {
      std::vector<char> buf = make_input(1000 + 300000 * static_cast<std::size_t>(round), DataType::kFloat32, rank);
      const std::size_t count = buf.size() / 4;
      comm.allreduce(buf.data(), count, DataType::kFloat32, {ReduceOp::kSum});
      EXPECT_EQ(check_result(buf, count, DataType::kFloat32, ReduceOp::kSum, comm.size()), 0u) << "after the mismatch";
    }
  });
  std::string first;
  for (int r = 0; r < n; ++r) {
    if (r == refuser) continue;
    const std::string& m = messages[static_cast<std::size_t>(r)];
    if (first.empty()) first = m;
    EXPECT_EQ(m, first) << "rank " << r << " words it differently";
    for (const auto& needle : needles) EXPECT_NE(m.find(needle), std::string::npos) << "'" << needle << "' in: " << m;
  }
}

TEST_P(CheckedOpsTest, UnequalCountsInAnAllreduceSmallAndLarge) {
  const auto [variant, n] = GetParam();
  for (std::size_t base : {std::size_t{10}, std::size_t{1} << 20}) {
    expect_mismatch(n, variant, [&](int rank, Communicator& comm) {
      std::vector<float> buf(base + 1, 1.0f);
      comm.allreduce(buf.data(), base + (rank == 1 ? 1 : 0), DataType::kFloat32);
    }, {"allreduce #1", "rank 1 has count " + std::to_string(base + 1), "count " + std::to_string(base)});
  }
}

TEST_P(CheckedOpsTest, Int32OnOneRankFloat32OnTheOthers) {
  const auto [variant, n] = GetParam();
  expect_mismatch(n, variant, [&](int rank, Communicator& comm) {
    std::vector<int32_t> buf(100000, 3);
    comm.allreduce(buf.data(), buf.size(), rank == 0 ? DataType::kInt32 : DataType::kFloat32);
  }, {"rank 0 has dtype int32", "float32"});
}

TEST_P(CheckedOpsTest, DifferentRootsInABroadcast) {
  const auto [variant, n] = GetParam();
  expect_mismatch(n, variant, [&](int rank, Communicator& comm) {
    std::vector<double> buf(70000, rank);
    comm.broadcast(buf.data(), buf.size(), DataType::kFloat64, rank == n - 1 ? 1 : 0);
  }, {"broadcast", "root 1", "root 0"});
}

TEST_P(CheckedOpsTest, DifferentOpsNamesShapesAndReduceOps) {
  const auto [variant, n] = GetParam();
  expect_mismatch(n, variant, [&](int rank, Communicator& comm) {
    std::vector<float> buf(64, 1.0f);
    if (rank == 1) {
      comm.broadcast(buf.data(), 64, DataType::kFloat32, 0);
    } else {
      comm.allreduce(buf.data(), 64, DataType::kFloat32);
    }
  }, {"rank 1 has op broadcast", "allreduce", "same collectives in the same order"});
  expect_mismatch(n, variant, [&](int rank, Communicator& comm) {
    std::vector<float> buf(64, 1.0f);
    comm.allreduce(buf.data(), 64, DataType::kFloat32, {ReduceOp::kSum, Algorithm::kAuto, rank == 0 ? "grad.w" : "grad.b"});
  }, {"name 'grad.w'", "name 'grad.b'"});
  expect_mismatch(n, variant, [&](int rank, Communicator& comm) {
    std::vector<float> buf(64, 1.0f);
    comm.allreduce(buf.data(), 64, DataType::kFloat32,
                   {ReduceOp::kSum, Algorithm::kAuto, "w", rank == 0 ? std::vector<int64_t>{8, 8} : std::vector<int64_t>{64}});
  }, {"shape"});
  expect_mismatch(n, variant, [&](int rank, Communicator& comm) {
    std::vector<float> buf(64, 1.0f);
    comm.allreduce(buf.data(), 64, DataType::kFloat32, {rank == 0 ? ReduceOp::kMax : ReduceOp::kSum});
  }, {"rank 0 has reduce op max", "reduce op sum"});
}

TEST_P(CheckedOpsTest, ReducescatterCountsAndAlltoallExpectations) {
  const auto [variant, n] = GetParam();
  expect_mismatch(n, variant, [&](int rank, Communicator& comm) {
    std::vector<std::size_t> counts(static_cast<std::size_t>(n), 4);
    if (rank == 0) {
      counts[0] = 5;
      counts[1] = 3;  // the same total, a different split
    }
    std::vector<float> in(4 * static_cast<std::size_t>(n), 1.0f), out(5);
    comm.reducescatter(in.data(), out.data(), counts, DataType::kFloat32);
  }, {"per-rank counts"});
  expect_mismatch(n, variant, [&](int rank, Communicator& comm) {
    std::vector<std::size_t> send(static_cast<std::size_t>(n), 2), recv(static_cast<std::size_t>(n), 2);
    if (rank == 1) recv[0] = 3;
    std::vector<int32_t> in(2 * static_cast<std::size_t>(n)), out(2 * static_cast<std::size_t>(n) + 1);
    comm.alltoallv_async(in.data(), send, out.data(), recv, DataType::kInt32).wait();
  }, {"rank 0 sends 2 elements to rank 1, which expects 3"});
}

TEST_P(CheckedOpsTest, ArgumentsOneRankRefusesFailEveryRank) {
  const auto [variant, n] = GetParam();
  expect_mismatch(n, variant, [&](int rank, Communicator& comm) {
    std::vector<float> buf(16, 1.0f);
    comm.allreduce(rank == 1 ? nullptr : buf.data(), 16, DataType::kFloat32);
  }, {"rank 1 was given invalid arguments"}, 1);
  expect_mismatch(n, variant, [&](int rank, Communicator& comm) {
    std::vector<float> buf(16, 1.0f);
    comm.broadcast(buf.data(), 16, DataType::kFloat32, rank == 0 ? n : 0);
  }, {"rank 0 was given invalid arguments"}, 0);
}

TEST_P(CheckedOpsTest, SharedBuffersOfDifferentSizes) {
  const auto [variant, n] = GetParam();
  expect_mismatch(n, variant, [&](int rank, Communicator& comm) { comm.allocate_shared(rank == 0 ? 128 : 256); },
                  {"allocate_shared", "size (bytes) 128", "size (bytes) 256"});
}

std::string world_name(const ::testing::TestParamInfo<World>& info) {
  return std::get<0>(info.param) + "_np" + std::to_string(std::get<1>(info.param));
}

INSTANTIATE_TEST_SUITE_P(Variants, CheckedOpsTest,
                         ::testing::Combine(::testing::Values(std::string("shm"), std::string("tcp"),
                                                              std::string("hosts")),
                                            ::testing::Values(2, 3)),
                         world_name);

// --- process sets ------------------------------------------------------------

class SplitTest : public ::testing::TestWithParam<std::string> {};

TEST_P(SplitTest, MembersGetAWorldOfTheirOwnInterleavedWithTheParent) {
  run_world(4, GetParam(), [&](int rank, Communicator& comm) {
    const std::vector<int> evens = {0, 2}, odds = {1, 3};
    auto e = comm.split(evens, "evens");
    auto o = comm.split(odds, "odds");
    EXPECT_EQ(e != nullptr, rank % 2 == 0);
    EXPECT_EQ(o != nullptr, rank % 2 == 1);
    Communicator& mine = e ? *e : *o;
    EXPECT_EQ(mine.size(), 2);
    EXPECT_EQ(mine.rank(), rank / 2);
    // Sub-world and world ops in flight together, in different orders per set.
    for (int it = 0; it < 3; ++it) {
      std::vector<double> sub(100003, rank), all(50, rank);
      Handle hs = mine.allreduce_async(sub.data(), sub.size(), DataType::kFloat64, {ReduceOp::kSum});
      Handle ha = comm.allreduce_async(all.data(), all.size(), DataType::kFloat64, {ReduceOp::kSum});
      ha.wait();
      hs.wait();
      EXPECT_EQ(sub[100002], rank % 2 == 0 ? 0 + 2 : 1 + 3);
      EXPECT_EQ(all[49], 0 + 1 + 2 + 3);
    }
    // Every kind of op within the set.
    int64_t me = rank, got[2] = {-1, -1};
    mine.allgather(&me, 1, DataType::kInt64, got);
    EXPECT_EQ(got[0], rank % 2);
    EXPECT_EQ(got[1], rank % 2 + 2);
    mine.barrier();
    // A set of a set, and the name used again after the set is gone.
    auto solo = mine.split({0}, "first");
    EXPECT_EQ(solo != nullptr, mine.rank() == 0);
    if (solo) {
      EXPECT_EQ(solo->size(), 1);
    }
    e.reset();
    o.reset();
    auto again = comm.split(evens, "evens");
    EXPECT_EQ(again != nullptr, rank % 2 == 0);
    if (again) {
      float x = 1.0f;
      again->allreduce(&x, 1, DataType::kFloat32);
      EXPECT_EQ(x, 2.0f);
    }
    // The whole world as a set, then the world itself once more.
    auto everyone = comm.split({0, 1, 2, 3}, "all");
    ASSERT_NE(everyone, nullptr);
    float y = 1.0f;
    everyone->allreduce(&y, 1, DataType::kFloat32);
    comm.allreduce(&y, 1, DataType::kFloat32);
    EXPECT_EQ(y, 16.0f);
  });
}

TEST_P(SplitTest, DisagreementAndBadRanksAreErrorsOnEveryRank) {
  const auto errors = run_world_collect(3, GetParam(), [&](int rank, Communicator& comm) {
    try {
      comm.split(rank == 2 ? std::vector<int>{0, 2} : std::vector<int>{0, 1}, "pair");
      ADD_FAILURE() << "rank " << rank << ": no error";
    } catch (const MismatchError& e) {
      EXPECT_NE(std::string(e.what()).find("members"), std::string::npos) << e.what();
    }
    EXPECT_THROW(comm.split({1, 0}, "unsorted"), InvalidArgument);
    EXPECT_THROW(comm.split({0, 3}, "outside"), InvalidArgument);
    auto ok = comm.split({1, 2}, "pair");
    EXPECT_EQ(ok != nullptr, rank != 0);
  });
  for (const auto& e : errors) EXPECT_FALSE(e) << what(e);
}

INSTANTIATE_TEST_SUITE_P(Variants, SplitTest, ::testing::Values("shm", "tcp", "hosts"));

// --- broken worlds -----------------------------------------------------------

std::size_t count_entries(const std::string& dir, const std::string& prefix = "") {
  std::size_t n = 0;
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d)) {
      if (e->d_name[0] != '.' && std::strncmp(e->d_name, prefix.c_str(), prefix.size()) == 0) ++n;
    }
    closedir(d);
  }
  return n;
}

struct Resources {
  std::size_t threads, fds, shm;
  static Resources now() {
    const std::string pid = std::to_string(getpid());
    return {count_entries("/proc/self/task"), count_entries("/proc/self/fd"), count_entries("/dev/shm", "muster-" + pid)};
  }
};

class BrokenWorldTest : public ::testing::TestWithParam<std::string> {};

// Rank 1 never enters the op: the others time out naming it; their later
// ops fail at once with the same error; everyone tears down, and a new
// world forms in the same threads over a new prefix and works.
TEST_P(BrokenWorldTest, StalledPeerIsNamedThenTheWorldFormsAgain) {
  const Resources before = Resources::now();
  const std::string variant = GetParam();
  auto options = [&](int rank) {
    CommOptions o = testing::variant_options(variant, rank, 3);
    o.timeout = std::chrono::milliseconds(1500);
    return o;
  };
  auto store = make_memory_kv_store();
  const auto errors = run_world_collect(3, variant, [&](int rank, Communicator& comm) {
    std::vector<float> buf(200000, 1.0f);
    if (rank == 1) {
      std::this_thread::sleep_for(std::chrono::milliseconds(4000));  // stalled: past the others' timeout
      return;
    }
    const auto start = std::chrono::steady_clock::now();
    try {
      comm.allreduce(buf.data(), buf.size(), DataType::kFloat32);
      ADD_FAILURE() << "rank " << rank << " finished without rank 1";
    } catch (const CommError& e) {
      const auto took = std::chrono::steady_clock::now() - start;
      EXPECT_GE(took, std::chrono::milliseconds(1400)) << e.what();
      EXPECT_LT(took, std::chrono::milliseconds(8000)) << e.what();
      // The rank waited on directly is named; the other one hears of it.
      EXPECT_NE(std::string(e.what()).find("rank 1"), std::string::npos) << e.what();
    }
    EXPECT_THROW(comm.barrier(), CommError) << "a broken world keeps failing";
  }, options, store);
  for (const auto& e : errors) EXPECT_FALSE(e) << what(e);
  // Destroyed (run_world_collect's scope): a new world forms and works.
  run_world(3, variant, [&](int rank, Communicator& comm) {
    std::vector<char> buf = make_input(300001, DataType::kFloat32, rank);
    comm.allreduce(buf.data(), 300001, DataType::kFloat32, {ReduceOp::kSum});
    EXPECT_EQ(check_result(buf, 300001, DataType::kFloat32, ReduceOp::kSum, 3), 0u);
  });
  const Resources after = Resources::now();
  EXPECT_EQ(after.threads, before.threads) << "threads left behind";
  EXPECT_EQ(after.fds, before.fds) << "descriptors (sockets, shm) left behind";
  EXPECT_EQ(after.shm, 0u) << "shared-memory objects left in /dev/shm";
}

// Destroying a Communicator whose op waits on a peer ends the op at once
// with CommError, instead of waiting out the timeout.
TEST_P(BrokenWorldTest, DestroyingEndsAnOpInFlightPromptly) {
  const std::string variant = GetParam();
  run_world(2, variant, [&](int rank, Communicator& comm) {
    if (rank == 1) return;  // leaves; rank 0's op waits on it
    std::vector<float> buf(1000, 1.0f);
    Handle h = comm.allreduce_async(buf.data(), buf.size(), DataType::kFloat32);
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    const auto start = std::chrono::steady_clock::now();
    // Closing is the Communicator's destructor; here the op is ended by the
    // peer's own departure (TCP) or our close, whichever comes first.
    EXPECT_THROW(h.wait(), CommError);
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(29));
  });
}

INSTANTIATE_TEST_SUITE_P(Variants, BrokenWorldTest, ::testing::Values("shm", "tcp", "hosts"));

// Closing from another thread while an op waits: the op fails at once.
TEST(BrokenWorld, CloseWhileWaitingReturnsPromptly) {
  auto store = make_memory_kv_store();
  std::unique_ptr<Communicator> zero;
  std::thread other([&] {
    auto one = Communicator::create(std::make_unique<KvBootstrap>(store, 1, 2, "close"), CommOptions{});
    std::this_thread::sleep_for(std::chrono::milliseconds(1500));  // keeps its end open, never joins the op
  });
  zero = Communicator::create(std::make_unique<KvBootstrap>(store, 0, 2, "close"), CommOptions{});
  std::vector<float> buf(1000, 1.0f);
  Handle h = zero->allreduce_async(buf.data(), buf.size(), DataType::kFloat32);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  const auto start = std::chrono::steady_clock::now();
  zero.reset();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(1000));
  try {
    h.wait();
    ADD_FAILURE() << "the op finished without its peer";
  } catch (const CommError& e) {
    EXPECT_NE(std::string(e.what()).find("closed"), std::string::npos) << e.what();
  }
  other.join();
}

}  // namespace
}  // namespace muster::runtime::comm
