// Point-to-point messages (Communicator::send_async / recv_async,
// runtime/comm/point_to_point.h), ranks on threads over an in-process store,
// on every transport (shm rings on one host, TCP streams, two hosts: rings
// within, streams between) and at 2, 3 and 4 ranks:
// - every size from 0 bytes to 16 MB arrives byte for byte, both ways at once;
// - tags: messages of other tags are taken out of order, one tag's in the
//   order sent; a recv from any source names the sender;
// - messages sent before their recv is posted (the unexpected queue, a large
//   one ahead of small ones of other tags) are not lost or reordered;
// - a size mismatch fails that recv with MismatchError naming both sizes, a
//   recv nobody answers fails with TimeoutError after its timeout, and in
//   both cases the next messages go through;
// - a peer that closed fails the recvs waiting on it with CommError naming
//   it, yet what it sent before is still received;
// - sends and recvs interleave with collectives in any order without
//   deadlock (two ranks each receiving before their collective's peer sends);
// - messages of 32 MB or more, copied once (from the sender's memory, each
//   side half where the recv is posted), arrive byte for byte;
// - invalid ranks are InvalidArgument.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "comm_thread_world.h"

namespace muster::runtime::comm {
namespace {

using testing::run_world;
using testing::run_world_collect;
using testing::what;

std::vector<uint8_t> pattern(std::size_t bytes, int seed) {
  std::vector<uint8_t> v(bytes);
  uint32_t x = 2463534242u + static_cast<uint32_t>(seed) * 7919u;
  for (auto& b : v) {
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    b = static_cast<uint8_t>(x);
  }
  return v;
}

P2pOptions tag(int64_t t, std::chrono::milliseconds timeout = std::chrono::milliseconds(0)) {
  P2pOptions o;
  o.tag = t;
  o.timeout = timeout;
  return o;
}

class PointToPoint : public ::testing::TestWithParam<std::tuple<std::string, int>> {
 protected:
  const std::string& variant() const { return std::get<0>(GetParam()); }
  int n() const { return std::get<1>(GetParam()); }
};

TEST_P(PointToPoint, EverySizeArrivesByteForByteBothWaysAtOnce) {
  run_world(n(), variant(), [&](int rank, Communicator& comm) {
    const int size = comm.size(), right = (rank + 1) % size, left = (rank + size - 1) % size;
    for (std::size_t bytes : {std::size_t{0}, std::size_t{1}, std::size_t{4095}, std::size_t{4096},
                              std::size_t{4097}, (std::size_t{1} << 20) + 3, std::size_t{16} << 20}) {
      const auto out = pattern(bytes, rank);
      std::vector<uint8_t> in(bytes, 0);
      int source = -7;
      Handle r = comm.recv_async(in.data(), bytes, left, tag(5), &source);
      Handle s = comm.send_async(out.data(), bytes, right, tag(5));
      s.wait();
      r.wait();
      EXPECT_EQ(source, left);
      EXPECT_TRUE(in == pattern(bytes, left)) << bytes << " bytes from rank " << left;
    }
  });
}

TEST_P(PointToPoint, TagsMatchOutOfOrderAndOneTagKeepsItsOrder) {
  run_world(n(), variant(), [&](int rank, Communicator& comm) {
    const int size = comm.size(), right = (rank + 1) % size, left = (rank + size - 1) % size;
    std::vector<int64_t> out;
    for (int t = 0; t < 5; ++t) out.push_back(rank * 100 + t);
    std::vector<Handle> sends;
    for (int t = 0; t < 5; ++t) sends.push_back(comm.send_async(&out[t], 8, right, tag(t)));
    for (int i = 0; i < 3; ++i) {
      static thread_local int64_t same[3];
      same[i] = rank * 1000 + i;
      sends.push_back(comm.send_async(&same[i], 8, right, tag(77)));
    }
    for (int t = 4; t >= 0; --t) {
      int64_t got = -1;
      comm.recv_async(&got, 8, left, tag(t)).wait();
      EXPECT_EQ(got, left * 100 + t);
    }
    for (int i = 0; i < 3; ++i) {
      int64_t got = -1;
      comm.recv_async(&got, 8, left, tag(77)).wait();
      EXPECT_EQ(got, left * 1000 + i) << "one tag's messages out of order";
    }
    for (auto& h : sends) h.wait();
  });
}

TEST_P(PointToPoint, RecvFromAnySourceNamesTheSender) {
  run_world(n(), variant(), [&](int rank, Communicator& comm) {
    if (rank == 0) {
      std::vector<int> seen;
      for (int i = 1; i < comm.size(); ++i) {
        int32_t got = -1;
        int source = -1;
        comm.recv_async(&got, 4, Communicator::kAnySource, tag(3), &source).wait();
        EXPECT_EQ(got, source * 11);
        seen.push_back(source);
      }
      std::sort(seen.begin(), seen.end());
      for (int i = 1; i < comm.size(); ++i) EXPECT_EQ(seen[static_cast<std::size_t>(i - 1)], i);
    } else {
      const int32_t mine = rank * 11;
      comm.send_async(&mine, 4, 0, tag(3)).wait();
    }
  });
}

TEST_P(PointToPoint, MessagesSentBeforeTheirRecvAreKeptAndMatched) {
  run_world(n(), variant(), [&](int rank, Communicator& comm) {
    if (rank == 0) {
      const auto big = pattern(8 << 20, 1);
      std::vector<Handle> sends;
      sends.push_back(comm.send_async(big.data(), big.size(), 1, tag(1)));
      static int64_t small[4] = {10, 11, 12, 13};
      for (int t = 0; t < 4; ++t) sends.push_back(comm.send_async(&small[t], 8, 1, tag(10 + t)));
      for (auto& h : sends) h.wait();  // all gone before rank 1 posts anything
      comm.barrier();
    } else if (rank == 1) {
      comm.barrier();
      for (int t = 3; t >= 0; --t) {
        int64_t got = 0;
        comm.recv_async(&got, 8, 0, tag(10 + t)).wait();
        EXPECT_EQ(got, 10 + t);
      }
      std::vector<uint8_t> big(8 << 20);
      comm.recv_async(big.data(), big.size(), 0, tag(1)).wait();
      EXPECT_TRUE(big == pattern(8 << 20, 1));
    } else {
      comm.barrier();
    }
  });
}

TEST_P(PointToPoint, SizeMismatchAndTimeoutFailOneRecvAndTheNextMessagesGoThrough) {
  run_world(n(), variant(), [&](int rank, Communicator& comm) {
    if (rank == 0) {
      const std::vector<uint8_t> five(20, 5);
      comm.send_async(five.data(), five.size(), 1, tag(4)).wait();
      comm.barrier();
      const int32_t after = 42;
      comm.send_async(&after, 4, 1, tag(4)).wait();
    } else if (rank == 1) {
      std::vector<uint8_t> four(16);
      try {
        comm.recv_async(four.data(), four.size(), 0, tag(4)).wait();
        ADD_FAILURE() << "a 20-byte message into a 16-byte recv did not fail";
      } catch (const MismatchError& e) {
        EXPECT_NE(std::string(e.what()).find("rank 0 sent 20 bytes, this recv holds 16"), std::string::npos) << e.what();
      }
      int32_t nothing = 0;
      const auto start = std::chrono::steady_clock::now();
      try {
        comm.recv_async(&nothing, 4, 0, tag(99, std::chrono::milliseconds(150))).wait();
        ADD_FAILURE() << "a recv nobody answered did not time out";
      } catch (const TimeoutError& e) {
        EXPECT_EQ(e.rank(), 0);
        EXPECT_NE(std::string(e.what()).find("timed out"), std::string::npos) << e.what();
      }
      EXPECT_GE(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(140));
      comm.barrier();
      int32_t got = 0;
      comm.recv_async(&got, 4, 0, tag(4)).wait();
      EXPECT_EQ(got, 42);
    } else {
      comm.barrier();
    }
  });
}

TEST_P(PointToPoint, InterleavesWithCollectivesInAnyOrder) {
  // Each rank posts its recv, runs a collective, sends, and only then waits:
  // a recv must not hold up the collectives, nor they the messages.
  run_world(n(), variant(), [&](int rank, Communicator& comm) {
    const int size = comm.size(), right = (rank + 1) % size, left = (rank + size - 1) % size;
    for (int round = 0; round < 5; ++round) {
      int64_t got = -1;
      Handle r = comm.recv_async(&got, 8, left, tag(round));
      float x = 1.0f;
      comm.allreduce(&x, 1, DataType::kFloat32);
      EXPECT_EQ(x, static_cast<float>(size));
      const int64_t mine = rank * 10 + round;
      comm.send_async(&mine, 8, right, tag(round)).wait();
      r.wait();
      EXPECT_EQ(got, left * 10 + round);
    }
  });
}

TEST_P(PointToPoint, InvalidRanksAreRefused) {
  run_world(n(), variant(), [&](int rank, Communicator& comm) {
    int32_t x = 0;
    EXPECT_THROW(comm.send_async(&x, 4, rank, tag(0)), InvalidArgument);
    EXPECT_THROW(comm.send_async(&x, 4, comm.size(), tag(0)), InvalidArgument);
    EXPECT_THROW(comm.recv_async(&x, 4, -2, tag(0)), InvalidArgument);
    EXPECT_THROW(comm.recv_async(&x, 4, rank, tag(0)), InvalidArgument);
  });
}

INSTANTIATE_TEST_SUITE_P(Transports, PointToPoint,
                         ::testing::Combine(::testing::Values("shm", "tcp", "hosts"), ::testing::Values(2, 3, 4)),
                         [](const auto& info) {
                           return std::get<0>(info.param) + "_" + std::to_string(std::get<1>(info.param));
                         });

// Single copy (sends of 32 MB or more between ranks of one host): the
// receiver reads from the sender's memory, and where the recv is posted
// first the sender writes half of it itself; where it is not (the message
// waits unexpected) the receiver reads it all into memory of its own. Byte
// for byte either way, and with single copy turned off (the ring).
TEST(PointToPointSingleCopy, LargeMessagesArriveByteForByteWhetherTheRecvIsPostedOrNot) {
  for (const bool single_copy : {true, false}) {
    const auto errors = run_world_collect(3, "shm", [&](int rank, Communicator& comm) {
      const std::size_t bytes = (std::size_t{40} << 20) + 3;
      const int right = (rank + 1) % 3, left = (rank + 2) % 3;
      const auto out = pattern(bytes, rank);
      std::vector<uint8_t> in(bytes, 0);
      // Posted first: the split copy.
      Handle r = comm.recv_async(in.data(), bytes, left, tag(1));
      comm.barrier();
      comm.send_async(out.data(), bytes, right, tag(1)).wait();
      r.wait();
      EXPECT_TRUE(in == pattern(bytes, left)) << "posted recv, single copy " << single_copy;
      // Sent first: the receiver takes it into memory of its own, then into the recv.
      std::fill(in.begin(), in.end(), 0);
      comm.send_async(out.data(), bytes, right, tag(2)).wait();
      comm.barrier();
      comm.recv_async(in.data(), bytes, left, tag(2)).wait();
      EXPECT_TRUE(in == pattern(bytes, left)) << "unexpected message, single copy " << single_copy;
    }, [&](int) {
      CommOptions o;
      o.timeout = std::chrono::milliseconds(30000);
      o.p2p_single_copy = single_copy;
      return o;
    });
    for (std::size_t r = 0; r < errors.size(); ++r) {
      if (errors[r]) ADD_FAILURE() << "single copy " << single_copy << ", rank " << r << ": " << what(errors[r]);
    }
  }
}

// A peer that closes: what it sent before stays receivable, the recv still
// waiting on it fails naming it (well within the timeout), and a send to it
// fails too.
TEST(PointToPointPeers, AClosedPeerFailsWhatWaitsOnItAfterWhatItSentArrives) {
  for (const std::string variant : {"shm", "tcp"}) {
    auto store = make_memory_kv_store();
    std::atomic<bool> closed{false};
    const auto errors = run_world_collect(
        2, variant,
        [&](int rank, Communicator& comm) {
          if (rank == 1) {
            const int32_t last = 7;
            comm.send_async(&last, 4, 0, tag(1)).wait();
            comm.barrier();
            return;  // the world's thread destroys this Communicator now
          }
          comm.barrier();
          int32_t got = 0;
          comm.recv_async(&got, 4, 1, tag(1)).wait();  // sent before it closed
          EXPECT_EQ(got, 7);
          const auto start = std::chrono::steady_clock::now();
          try {
            comm.recv_async(&got, 4, 1, tag(2)).wait();
            ADD_FAILURE() << variant << ": a recv from a closed peer did not fail";
          } catch (const CommError& e) {
            EXPECT_EQ(e.rank(), 1) << e.what();
            EXPECT_NE(std::string(e.what()).find("rank 1"), std::string::npos) << e.what();
          }
          EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
          closed = true;
        },
        nullptr, store);
    for (std::size_t r = 0; r < errors.size(); ++r) {
      if (errors[r]) ADD_FAILURE() << variant << " rank " << r << ": " << what(errors[r]);
    }
    EXPECT_TRUE(closed.load()) << variant;
  }
}

}  // namespace
}  // namespace muster::runtime::comm
