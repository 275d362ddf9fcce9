// The small-message path of a world whose ranks all share one host
// (world_small.cc over shm/small_ops.h), with ranks on threads over an
// in-process store:
// - allreduce, broadcast, allgather and barrier give the right results on
//   both sides of every limit: empty, one element, the flat/two-phase
//   boundary, exactly the small limit (small path) and one element more
//   (the ring), every reduce op, floats reduced to the same bits everywhere;
// - an op that is small on one rank and not on another, or refused by one
//   rank, is the same MismatchError on every rank, and the world goes on;
// - a peer that left (its Communicator destroyed) is named in a CommError
//   in well under the timeout, not waited out; one that stalls is named
//   after the timeout, and the message says the small path was waiting;
// - the small-bytes option must be equal on every rank; 0 turns the engine
//   off and the same ops still work;
// - nothing (threads, descriptors, /dev/shm objects) is left afterwards.
#include <dirent.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "comm_reference.h"
#include "comm_thread_world.h"

namespace muster::runtime::comm {
namespace {

using namespace testing::reference;
using testing::run_world;
using testing::run_world_collect;
using testing::what;

// Elements of float32 at the limit these tests set (256 KB per rank: the
// default with a CPU per rank; see AutoLimitFollowsRanksAndCpus).
constexpr std::size_t kLimitBytes = 256 * 1024;
const std::size_t kLimitFloats = kLimitBytes / 4;

std::function<CommOptions(int)> shm_options(std::chrono::milliseconds timeout = std::chrono::milliseconds(30000)) {
  return [timeout](int) {
    CommOptions o;
    o.timeout = timeout;
    o.small_bytes = kLimitBytes;
    return o;
  };
}

TEST(SmallWorld, AutoLimitFollowsRanksAndCpus) {
  EXPECT_EQ(CommOptions{}.small_bytes, CommOptions::kAutoSmallBytes);
  EXPECT_EQ(auto_small_bytes(2, 2), kLimitBytes);
  EXPECT_EQ(auto_small_bytes(8, 16), kLimitBytes);
  EXPECT_EQ(auto_small_bytes(3, 2), std::size_t{4} << 20);  // more ranks than CPUs
  EXPECT_EQ(auto_small_bytes(4, 0), kLimitBytes);           // CPUs unknown
}

// The default on this machine: an op just over 256 KB takes the small path
// exactly when the world has more ranks than the host has CPUs (its timeout
// message names the path).
TEST(SmallWorld, DefaultLimitTakesMidSizesWhenOversubscribed) {
  const long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  const int n = static_cast<int>(cpus) + 1;  // ranks are threads here: any host can be oversubscribed
  const std::size_t count = kLimitFloats + 1;
  const auto errors = run_world_collect(n, "shm", [&](int rank, Communicator& comm) {
    std::vector<char> buf = make_input(count, DataType::kFloat32, rank);
    comm.allreduce(buf.data(), count, DataType::kFloat32);
    EXPECT_EQ(check_result(buf, count, DataType::kFloat32, ReduceOp::kSum, n), 0u);
    if (rank == n - 1) return;  // gone: the others' next op names the path it waited on
    try {
      comm.allreduce(buf.data(), count, DataType::kFloat32);
      ADD_FAILURE() << "finished without rank " << n - 1;
    } catch (const CommError& e) {
      EXPECT_NE(std::string(e.what()).find("small path"), std::string::npos) << e.what();
    }
  }, [](int) {
    CommOptions o;
    o.timeout = std::chrono::milliseconds(30000);
    return o;
  });
  for (const auto& e : errors) EXPECT_FALSE(e) << what(e);
}

void run_shm(int n, const testing::RankBody& body, const std::function<CommOptions(int)>& options = shm_options()) {
  const auto errors = run_world_collect(n, "shm", body, options);
  for (int r = 0; r < n; ++r) {
    if (errors[static_cast<std::size_t>(r)]) ADD_FAILURE() << "rank " << r << ": " << what(errors[static_cast<std::size_t>(r)]);
  }
}

class SmallWorldTest : public ::testing::TestWithParam<int> {};

TEST_P(SmallWorldTest, AllreduceOnBothSidesOfEveryLimit) {
  const int n = GetParam();
  const std::vector<std::size_t> counts = {0, 1, 7, 2048, 2049, kLimitFloats, kLimitFloats + 1};
  const std::vector<DataType> dtypes = {DataType::kFloat32, DataType::kFloat64, DataType::kFloat16, DataType::kInt32};
  const std::vector<ReduceOp> ops = {ReduceOp::kSum, ReduceOp::kAverage, ReduceOp::kMin, ReduceOp::kMax};
  // Every rank's float32 sums, to compare bit for bit.
  std::vector<std::vector<char>> sums(static_cast<std::size_t>(n));
  run_shm(n, [&](int rank, Communicator& comm) {
    for (DataType t : dtypes) {
      for (ReduceOp op : ops) {
        for (std::size_t count : counts) {
          std::vector<char> buf = make_input(count, t, rank);
          comm.allreduce(buf.data(), count, t, {op});
          EXPECT_EQ(check_result(buf, count, t, op, n), 0u)
              << "rank " << rank << " " << dtype_name(t) << " " << reduce_op_name(op) << " count " << count;
          if (t == DataType::kFloat32 && op == ReduceOp::kSum && (count == 2048 || count == 2049)) {
            auto& mine = sums[static_cast<std::size_t>(rank)];
            mine.insert(mine.end(), buf.begin(), buf.end());  // flat and two-phase
          }
        }
      }
    }
  });
  for (int r = 1; r < n; ++r) {
    EXPECT_TRUE(sums[static_cast<std::size_t>(r)] == sums[0]) << "rank " << r << "'s float32 sum differs in its bits";
  }
}

TEST_P(SmallWorldTest, BroadcastAllgatherAndBarrier) {
  const int n = GetParam();
  run_shm(n, [&](int rank, Communicator& comm) {
    for (std::size_t count : {std::size_t{0}, std::size_t{1}, std::size_t{1000}, kLimitFloats, kLimitFloats + 1}) {
      for (int root = 0; root < n; ++root) {
        std::vector<float> buf(count);
        for (std::size_t i = 0; i < count; ++i) buf[i] = static_cast<float>(rank * 1000003 + i);
        comm.broadcast(buf.data(), count, DataType::kFloat32, root);
        for (std::size_t i = 0; i < count; ++i) {
          if (buf[i] != static_cast<float>(root * 1000003 + i)) {
            ADD_FAILURE() << "broadcast of " << count << " from " << root << ": rank " << rank << " element " << i;
            break;
          }
        }
      }
      // Allgather, once into a separate buffer and once in place (the send
      // block inside recv, where the rank's own block goes).
      for (bool in_place : {false, true}) {
        std::vector<int32_t> recv(count * static_cast<std::size_t>(n), -1);
        std::vector<int32_t> own(count);
        for (std::size_t i = 0; i < count; ++i) own[i] = static_cast<int32_t>(rank * 7 + i);
        int32_t* send = own.data();
        if (in_place) {
          send = recv.data() + count * static_cast<std::size_t>(rank);
          std::memcpy(send, own.data(), count * 4);
        }
        comm.allgather(send, count, DataType::kInt32, recv.data());
        for (int p = 0; p < n; ++p) {
          for (std::size_t i = 0; i < count; ++i) {
            if (recv[static_cast<std::size_t>(p) * count + i] != static_cast<int32_t>(p * 7 + i)) {
              ADD_FAILURE() << "allgather of " << count << (in_place ? " in place" : "") << ": rank " << rank
                            << " block " << p << " element " << i;
              p = n;
              break;
            }
          }
        }
      }
    }
    for (int i = 0; i < 100; ++i) comm.barrier({"step"});
  });
}

// Ops queued without waiting, then waited on in reverse: the progress
// thread runs them in order behind the one a caller takes.
TEST_P(SmallWorldTest, QueuedOpsWaitedOutOfOrder) {
  const int n = GetParam();
  run_shm(n, [&](int rank, Communicator& comm) {
    std::vector<std::vector<char>> bufs;
    std::vector<Handle> handles;
    for (int i = 0; i < 40; ++i) bufs.push_back(make_input(static_cast<std::size_t>(1 + i * 97), DataType::kFloat64, rank));
    for (int i = 0; i < 40; ++i) {
      handles.push_back(comm.allreduce_async(bufs[static_cast<std::size_t>(i)].data(), static_cast<std::size_t>(1 + i * 97),
                                             DataType::kFloat64, {ReduceOp::kSum}));
    }
    for (int i = 39; i >= 0; --i) handles[static_cast<std::size_t>(i)].wait();
    for (int i = 0; i < 40; ++i) {
      EXPECT_EQ(check_result(bufs[static_cast<std::size_t>(i)], static_cast<std::size_t>(1 + i * 97), DataType::kFloat64,
                             ReduceOp::kSum, n), 0u) << "op " << i;
    }
  });
}

// One rank just over the limit (its op goes the ring's way), the others at
// it (the small path): they still meet in the same round and all throw the
// same MismatchError; then the world works.
TEST_P(SmallWorldTest, SmallOnOneRankLargeOnAnotherIsAMismatch) {
  const int n = GetParam();
  std::vector<std::string> messages(static_cast<std::size_t>(n));
  run_shm(n, [&](int rank, Communicator& comm) {
    std::vector<float> buf(kLimitFloats + 1, 1.0f);
    try {
      comm.allreduce(buf.data(), kLimitFloats + (rank == n - 1 ? 1 : 0), DataType::kFloat32);
      ADD_FAILURE() << "rank " << rank << ": no error";
    } catch (const MismatchError& e) {
      messages[static_cast<std::size_t>(rank)] = e.what();
    }
    std::vector<char> small = make_input(3, DataType::kFloat32, rank);
    comm.allreduce(small.data(), 3, DataType::kFloat32, {ReduceOp::kSum});
    EXPECT_EQ(check_result(small, 3, DataType::kFloat32, ReduceOp::kSum, n), 0u) << "after the mismatch";
  });
  auto common = [](const std::string& m) { return m.substr(0, m.rfind(" (this is rank ")); };
  for (int r = 0; r < n; ++r) {
    const std::string& m = messages[static_cast<std::size_t>(r)];
    EXPECT_EQ(common(m), common(messages[0])) << "rank " << r;
    EXPECT_NE(m.find("rank " + std::to_string(n - 1) + " has count " + std::to_string(kLimitFloats + 1)),
              std::string::npos) << m;
  }
}

// A peer whose Communicator is gone: the others' small op fails naming it,
// at once (the peer table says it closed), not after the 30 s timeout.
TEST_P(SmallWorldTest, DepartedPeerIsNamedPromptly) {
  const int n = GetParam();
  const auto errors = run_world_collect(n, "shm", [&](int rank, Communicator& comm) {
    if (rank == 1) return;  // leaves: its Communicator is destroyed
    std::vector<float> buf(16, 1.0f);
    const auto start = std::chrono::steady_clock::now();
    try {
      comm.allreduce(buf.data(), buf.size(), DataType::kFloat32);
      ADD_FAILURE() << "rank " << rank << " finished without rank 1";
    } catch (const CommError& e) {
      EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10)) << e.what();
      EXPECT_NE(std::string(e.what()).find("rank 1"), std::string::npos) << e.what();
    }
    EXPECT_THROW(comm.barrier(), CommError) << "a broken world keeps failing";
  }, shm_options());
  for (const auto& e : errors) EXPECT_FALSE(e) << what(e);
}

// check_peers(): no op, no communication; a peer whose Communicator is gone
// is named at once (an optimizer asks before computing a backward pass whose
// gradients could never be averaged), a world whose ranks are all there
// passes.
TEST(SmallWorld, CheckPeersNamesADepartedPeerWithoutAnOp) {
  std::atomic<int> saw{0};  // ranks 0 and 1 stay until both saw it (else they would see each other leave)
  const auto errors = run_world_collect(3, "shm", [&](int rank, Communicator& comm) {
    comm.barrier();
    EXPECT_NO_THROW(comm.check_peers());
    comm.barrier();
    if (rank == 2) return;  // leaves: its Communicator is destroyed
    bool named = false;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (!named && std::chrono::steady_clock::now() < deadline) {
      try {
        comm.check_peers();
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      } catch (const CommError& e) {
        named = true;
        EXPECT_EQ(e.rank(), 2) << e.what();
        EXPECT_NE(std::string(e.what()).find("rank 2"), std::string::npos) << e.what();
      }
    }
    EXPECT_TRUE(named) << "rank " << rank << " never learned that rank 2 left";
    saw.fetch_add(1);
    while (saw.load() < 2 && std::chrono::steady_clock::now() < deadline) std::this_thread::yield();
  }, shm_options());
  for (const auto& e : errors) EXPECT_FALSE(e) << what(e);
}

// A peer that never comes: named after the timeout; the message says which
// op on which path was waiting. Just over the limit it is the ring's.
TEST(SmallWorld, StalledPeerIsNamedAfterTheTimeout) {
  for (std::size_t count : {std::size_t{8}, kLimitFloats + 1}) {
    const auto errors = run_world_collect(2, "shm", [&](int rank, Communicator& comm) {
      if (rank == 1) {
        std::this_thread::sleep_for(std::chrono::milliseconds(2500));  // past rank 0's timeout
        return;
      }
      std::vector<float> buf(count, 1.0f);
      const auto start = std::chrono::steady_clock::now();
      try {
        comm.allreduce(buf.data(), count, DataType::kFloat32);
        ADD_FAILURE() << "finished without rank 1";
      } catch (const CommError& e) {
        EXPECT_GE(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(700)) << e.what();
        const std::string m = e.what();
        EXPECT_NE(m.find("rank 1"), std::string::npos) << m;
        EXPECT_EQ(m.find("small path") != std::string::npos, count == 8) << m;
      }
    }, shm_options(std::chrono::milliseconds(800)));
    for (const auto& e : errors) EXPECT_FALSE(e) << what(e);
  }
}

TEST(SmallWorld, SmallBytesMustBeEqualOnEveryRank) {
  const auto errors = run_world_collect(2, "shm", [](int, Communicator&) {}, [](int rank) {
    CommOptions o;
    o.small_bytes = rank == 0 ? 4096 : 8192;
    return o;
  });
  for (const auto& e : errors) {
    ASSERT_TRUE(e);
    EXPECT_NE(what(e).find("MUSTER_COMM_SMALL_BYTES differs between ranks"), std::string::npos) << what(e);
  }
}

// Without the engine (small_bytes 0) the ops exchange through the control
// table, and with a 1 KB limit the ops just above it take the ring: both
// give the same results.
TEST(SmallWorld, OtherLimitsGiveTheSameResults) {
  for (std::size_t limit : {std::size_t{0}, std::size_t{1024}}) {
    run_shm(3, [&](int rank, Communicator& comm) {
      for (std::size_t count : {std::size_t{1}, std::size_t{256}, std::size_t{257}, std::size_t{5000}}) {
        std::vector<char> buf = make_input(count, DataType::kFloat32, rank);
        comm.allreduce(buf.data(), count, DataType::kFloat32, {ReduceOp::kAverage});
        EXPECT_EQ(check_result(buf, count, DataType::kFloat32, ReduceOp::kAverage, 3), 0u) << limit << " " << count;
        std::vector<float> b(count, static_cast<float>(rank));
        comm.broadcast(b.data(), count, DataType::kFloat32, 2);
        EXPECT_EQ(b[count - 1], 2.0f);
      }
      comm.barrier();
    }, [limit](int) {
      CommOptions o;
      o.small_bytes = limit;
      return o;
    });
  }
}

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

// Worlds that ran small ops, one of them broken by a departed peer, leave
// no threads, descriptors or shared-memory objects behind.
TEST(SmallWorld, NothingLeftAfterward) {
  const std::string own_shm = "muster-" + std::to_string(getpid());
  const std::size_t threads = count_entries("/proc/self/task"), fds = count_entries("/proc/self/fd");
  for (int round = 0; round < 3; ++round) {
    run_world_collect(3, "shm", [&](int rank, Communicator& comm) {
      std::vector<float> buf(64, 1.0f);
      comm.allreduce(buf.data(), buf.size(), DataType::kFloat32);
      if (round == 2 && rank == 2) return;
      try {
        for (int i = 0; i < 5; ++i) comm.barrier();
      } catch (const CommError&) {
        EXPECT_EQ(round, 2);
      }
    }, shm_options());
  }
  EXPECT_EQ(count_entries("/proc/self/task"), threads) << "threads left behind";
  EXPECT_EQ(count_entries("/proc/self/fd"), fds) << "descriptors left behind";
  EXPECT_EQ(count_entries("/dev/shm", own_shm), 0u) << "shared-memory objects left in /dev/shm";
}

INSTANTIATE_TEST_SUITE_P(Ranks, SmallWorldTest, ::testing::Values(2, 3, 4));

}  // namespace
}  // namespace muster::runtime::comm
