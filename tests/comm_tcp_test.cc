// The TCP ring transport under real mpirun on one host (every link forced
// to TCP over loopback): the ring really runs over it, its options (two
// streams, small segments and blocks) give exact results, and bad bootstrap
// data (ranks that disagree on the transport or the stream count, an
// interface that does not exist) fails Communicator::create() on every rank
// with an error naming the rank and the setting, instead of hanging.
//
// The broad dtype x op x size matrix over TCP is comm_allreduce_tcp_np{2,3,4}
// (comm_allreduce_test --transport=tcp); peers killed mid-run are in
// comm_fault_test (ring-tcp-links).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>

#include <string>
#include <vector>

#include "comm_mpi_main.h"
#include "comm_reference.h"
#include "runtime/comm/communicator.h"
#include "runtime/comm/ring_allreduce.h"
#include "runtime/comm/world_communicator.h"

namespace muster::runtime::comm {
namespace {

using testing::world;
using namespace testing::reference;

CommOptions tcp_options() {
  CommOptions o;
  o.ring_transport = RingTransport::kTcp;
  o.timeout = std::chrono::milliseconds(10000);
  return o;
}

TEST(TcpTransport, WorldRingRunsOverTcp) {
  auto* w = dynamic_cast<WorldCommunicator*>(world().get());
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(w->ring_transport_name(), "tcp");
  // ctest runs this suite with the links' bytes moved inline and on I/O threads.
  if (const char* t = std::getenv("MUSTER_COMM_TCP_THREADS"); t && (*t == '0' || *t == '1')) {
    EXPECT_EQ(w->tcp_io_threads(), *t == '1');
  }
}

TEST(TcpTransport, TwoStreamsSmallSegmentsAndBlocksAreExact) {
  CommOptions o = tcp_options();
  o.tcp_streams = 2;
  o.segment_bytes = 4096;
  o.block_bytes = 64 * 1024;
  o.tcp_socket_buffer_bytes = 0;  // kernel autotuning
  auto comm = Communicator::create(o);
  for (DataType t : {DataType::kFloat32, DataType::kFloat16, DataType::kInt64}) {
    for (std::size_t count : {std::size_t{3}, std::size_t{100003}}) {
      for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAverage, ReduceOp::kMax}) {
        std::vector<char> buf = make_input(count, t, comm->rank());
        comm->allreduce(buf.data(), count, t, {op, Algorithm::kRing});
        EXPECT_EQ(check_result(buf, count, t, op, comm->size()), 0u)
            << dtype_name(t) << " x " << count << " " << reduce_op_name(op);
      }
    }
  }
}

TEST(TcpTransport, IoThreadsRunOnlyWhereEveryRankHasThem) {
  // The ring's block size follows the choice, so the ranks agree on it; so
  // does the default stream count (1 inline, 2 with threads): were it taken
  // from a rank's own wish, rank 0 here would connect 1 stream where its
  // neighbours expect 2, and formation would fail.
  const char* env = std::getenv("MUSTER_COMM_TCP_THREADS");
  const std::string saved = env ? env : "";
  unsetenv("MUSTER_COMM_TCP_THREADS");
  CommOptions o = tcp_options();
  o.tcp_threads = world()->rank() == 0 ? CommOptions::TcpThreads::kOff : CommOptions::TcpThreads::kOn;
  auto mixed = Communicator::create(o);
  EXPECT_FALSE(dynamic_cast<WorldCommunicator&>(*mixed).tcp_io_threads());
  o.tcp_threads = CommOptions::TcpThreads::kOn;
  auto on = Communicator::create(o);
  EXPECT_TRUE(dynamic_cast<WorldCommunicator&>(*on).tcp_io_threads());
  for (Communicator* c : {mixed.get(), on.get()}) {
    std::vector<char> buf = make_input(100003, DataType::kFloat32, c->rank());
    c->allreduce(buf.data(), 100003, DataType::kFloat32, {ReduceOp::kSum, Algorithm::kRing});
    EXPECT_EQ(check_result(buf, 100003, DataType::kFloat32, ReduceOp::kSum, c->size()), 0u);
  }
  if (!saved.empty()) setenv("MUSTER_COMM_TCP_THREADS", saved.c_str(), 1);
}

// The block of an all-TCP ring is agreed: inline it follows the largest
// round trip any rank's kernel timed (tcp_inline_block_bytes; loopback's is
// short), with I/O threads 16 MB. A buffer of several blocks and a
// short last one comes out exact either way.
TEST(TcpTransport, RingBlockIsAgreedAndFollowsTheRoundTrip) {
  const char* env = std::getenv("MUSTER_COMM_TCP_THREADS");
  const std::string saved = env ? env : "";
  unsetenv("MUSTER_COMM_TCP_THREADS");
  for (auto threads : {CommOptions::TcpThreads::kOff, CommOptions::TcpThreads::kOn}) {
    CommOptions o = tcp_options();
    o.tcp_threads = threads;
    auto comm = Communicator::create(o);
    auto& w = dynamic_cast<WorldCommunicator&>(*comm);
    const std::size_t block = w.tcp_ring_block_bytes();
    if (threads == CommOptions::TcpThreads::kOn) {
      EXPECT_EQ(block, std::size_t{16} << 20);
      EXPECT_EQ(w.tcp_ring_round_trip_us(), 0u);
    } else {
      EXPECT_GT(w.tcp_ring_round_trip_us(), 0u) << "the kernel timed no handshake";
      EXPECT_EQ(block, tcp_inline_block_bytes(w.tcp_ring_round_trip_us(), comm->size()));
    }
    const auto rtt = static_cast<int64_t>(w.tcp_ring_round_trip_us());
    int64_t mine[4] = {static_cast<int64_t>(block), -static_cast<int64_t>(block), rtt, -rtt};
    comm->allreduce(mine, 4, DataType::kInt64, {ReduceOp::kMax, Algorithm::kRing});
    EXPECT_EQ(mine[0], -mine[1]) << "ranks cut different blocks";
    EXPECT_EQ(mine[2], -mine[3]) << "ranks agreed on different round trips";
    const std::size_t count = 3 * (std::size_t{1} << 20) / 4 + 12345;  // 3 MB of floats and a bit
    std::vector<char> buf = make_input(count, DataType::kFloat32, comm->rank());
    comm->allreduce(buf.data(), count, DataType::kFloat32, {ReduceOp::kSum, Algorithm::kRing});
    EXPECT_EQ(check_result(buf, count, DataType::kFloat32, ReduceOp::kSum, comm->size()), 0u);
  }
  if (!saved.empty()) setenv("MUSTER_COMM_TCP_THREADS", saved.c_str(), 1);
}

// create() must throw on every rank; returns this rank's message.
std::string create_error(const CommOptions& o) {
  try {
    Communicator::create(o);
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

TEST(TcpBootstrapMpi, RanksDisagreeingOnTheTransportFailClearly) {
  CommOptions o = tcp_options();
  if (world()->rank() == 1) o.ring_transport = RingTransport::kMpi;
  const std::string e = create_error(o);
  EXPECT_NE(e.find("set MUSTER_COMM_RING_TRANSPORT alike on every rank"), std::string::npos) << e;
  EXPECT_NE(e.find("rank 1"), std::string::npos) << e;
}

TEST(TcpBootstrapMpi, RanksDisagreeingOnStreamsFailClearly) {
  CommOptions o = tcp_options();
  if (world()->rank() == 0) o.tcp_streams = 3;
  const std::string e = create_error(o);
  // The ranks that connect to rank 0 or are its right neighbour see it.
  EXPECT_TRUE(e.find("MUSTER_COMM_TCP_STREAMS") != std::string::npos || e.find("rank 0 failed") != std::string::npos)
      << e;
}

TEST(TcpBootstrapMpi, UnknownInterfaceOnOneRankFailsEveryRank) {
  if (std::getenv("MUSTER_COMM_TCP_IFACE") || std::getenv("OMPI_MCA_btl_tcp_if_include")) {
    GTEST_SKIP() << "the environment names the interface, which wins over CommOptions";
  }
  CommOptions o = tcp_options();
  if (world()->rank() == 1) o.tcp_interface = "nosuch0";
  const std::string e = create_error(o);
  if (world()->rank() == 1) {
    EXPECT_NE(e.find("'nosuch0'"), std::string::npos) << e;
    EXPECT_NE(e.find("lo 127.0.0.1"), std::string::npos) << e;
  } else {
    // Its neighbours see it published no endpoint; the others hear it failed.
    EXPECT_TRUE(e.find("rank 1 published no TCP endpoint (its listener failed") != std::string::npos ||
                e.find("rank 1 failed to open its TCP listener") != std::string::npos ||
                e.find("because of rank 1") != std::string::npos)
        << e;
  }
  // The world communicator still works afterwards.
  std::vector<char> buf = make_input(1000, DataType::kFloat32, world()->rank());
  world()->allreduce(buf.data(), 1000, DataType::kFloat32, {ReduceOp::kSum, Algorithm::kRing});
  EXPECT_EQ(check_result(buf, 1000, DataType::kFloat32, ReduceOp::kSum, world()->size()), 0u);
}

}  // namespace
}  // namespace muster::runtime::comm

int main(int argc, char** argv) { return muster::runtime::comm::testing::run_mpi_tests(argc, argv); }
