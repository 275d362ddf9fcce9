// The TCP transport without MPI: real loopback sockets between ranks on
// threads. The ring over TcpSender/TcpReceiver (1 and 2 streams, odd counts,
// many segments and blocks), the failure paths (a peer that closes, an abort
// frame, ranks that disagree on the op's size), the bootstrap's Hello checks
// and deadlines, and the interface choice.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <sys/socket.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <numeric>
#include <thread>
#include <tuple>
#include <vector>

#include "runtime/comm/comm_env.h"
#include "runtime/comm/reduce.h"
#include "runtime/comm/ring_allreduce.h"
#include "runtime/comm/tcp/bootstrap.h"
#include "runtime/comm/tcp/interfaces.h"
#include "runtime/comm/tcp/tcp_transport.h"

namespace muster::runtime::comm::tcp {
namespace {

using namespace std::chrono_literals;

constexpr uint64_t kToken = 0x1234abcd5678ef00ULL;

in_addr loopback() {
  in_addr a{};
  a.s_addr = htonl(INADDR_LOOPBACK);
  return a;
}

Deadline soon(std::chrono::milliseconds ms = 5000ms) { return std::chrono::steady_clock::now() + ms; }

// The streams of one directed link from rank `from` to rank `to`.
struct Pair {
  std::vector<Socket> out, in;
};

Pair connect_pair(int from, int to, int streams) {
  Listener listener = Listener::open(loopback(), 1 << 20);
  Pair p;
  for (int s = 0; s < streams; ++s) {
    Hello h;
    h.from = from;
    h.to = to;
    h.stream = static_cast<uint32_t>(s);
    h.token = kToken;
    p.out.push_back(connect_stream(listener.address(), listener.port(), to, h, soon(), 1 << 20));
  }
  p.in = accept_streams(listener, from, to, kToken, streams, soon());
  for (auto& s : p.out) configure_stream(s, 10000ms);
  for (auto& s : p.in) configure_stream(s, 10000ms);
  return p;
}

// n ranks in a ring, each with a TcpTransport to its right and from its left.
// io_threads: the links move their bytes on I/O threads (else inline).
std::vector<std::unique_ptr<TcpTransport>> make_ring(int n, int streams, std::size_t segment_bytes, bool io_threads) {
  std::vector<Pair> links;  // link r: r -> r+1
  for (int r = 0; r < n; ++r) links.push_back(connect_pair(r, (r + 1) % n, streams));
  std::vector<std::unique_ptr<TcpTransport>> ring;
  for (int r = 0; r < n; ++r) {
    const int left = (r + n - 1) % n;
    auto bell = io_threads ? std::make_shared<ProgressBell>() : nullptr;
    auto sender = std::make_unique<TcpSender>(std::move(links[static_cast<std::size_t>(r)].out), (r + 1) % n, 4, bell);
    auto receiver = std::make_unique<TcpReceiver>(std::move(links[static_cast<std::size_t>(left)].in), left,
                                                  segment_bytes, 4, bell);
    ring.push_back(std::make_unique<TcpTransport>(std::move(sender), std::move(receiver), bell));
  }
  return ring;
}

struct RingCase {
  int ranks;
  int streams;
  std::size_t count;
  std::size_t segment_bytes;
  std::size_t block_bytes;
};

// Every case inline and with I/O threads.
class TcpRingTest : public ::testing::TestWithParam<std::tuple<RingCase, bool>> {};

TEST_P(TcpRingTest, SumsAcrossRanksOnThreads) {
  const RingCase c = std::get<0>(GetParam());
  auto ring = make_ring(c.ranks, c.streams, c.segment_bytes, std::get<1>(GetParam()));
  std::vector<std::vector<float>> data(static_cast<std::size_t>(c.ranks));
  std::vector<std::exception_ptr> errors(static_cast<std::size_t>(c.ranks));
  std::vector<std::thread> threads;
  for (int r = 0; r < c.ranks; ++r) {
    auto& d = data[static_cast<std::size_t>(r)];
    d.resize(c.count);
    for (std::size_t i = 0; i < c.count; ++i) d[i] = static_cast<float>((i % 101) + 1000 * r);
    threads.emplace_back([&, r] {
      try {
        TcpTransport& t = *ring[static_cast<std::size_t>(r)];
        auto send = t.send_link();
        auto recv = t.recv_link();
        Watchdog watchdog(10000ms, nullptr, 1, "tcp ring test");
        watchdog.set_sleeper(&t);
        RingContext ctx;
        ctx.rank = r;
        ctx.size = c.ranks;
        ctx.segment_bytes = c.segment_bytes;
        ctx.block_bytes = c.block_bytes;
        auto& d = data[static_cast<std::size_t>(r)];
        ring_allreduce(d.data(), d.size(), DataType::kFloat32, ReduceOp::kSum, ctx, *send, *recv, watchdog);
      } catch (...) {
        errors[static_cast<std::size_t>(r)] = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  const float ranks_sum = 1000.0f * static_cast<float>(c.ranks * (c.ranks - 1) / 2);
  for (int r = 0; r < c.ranks; ++r) {
    ASSERT_FALSE(errors[static_cast<std::size_t>(r)]) << "rank " << r << " threw";
    const auto& d = data[static_cast<std::size_t>(r)];
    std::size_t wrong = 0;
    for (std::size_t i = 0; i < c.count; ++i) {
      wrong += d[i] != static_cast<float>(c.ranks) * static_cast<float>(i % 101) + ranks_sum;
    }
    EXPECT_EQ(wrong, 0u) << "rank " << r;
  }
}

INSTANTIATE_TEST_SUITE_P(Sizes, TcpRingTest,
                         ::testing::Combine(::testing::Values(RingCase{2, 1, 1, 4096, 0}, RingCase{2, 1, 7, 4096, 0},
                                                              RingCase{3, 1, 100003, 4096, 65536},  // many segments
                                                              RingCase{3, 2, 100003, 8192, 0},      // two streams
                                                              RingCase{4, 2, (4u << 20) / 4 + 5, 256 * 1024, 1 << 20},
                                                              RingCase{5, 1, 1000, 64, 0}),
                                            ::testing::Bool()));

// A single directed link 0 -> 1.
struct Link {
  std::unique_ptr<TcpSender> sender;
  std::unique_ptr<TcpReceiver> receiver;
};

Link make_link(bool io_threads, int streams = 1) {
  Pair p = connect_pair(0, 1, streams);
  auto bell = io_threads ? std::make_shared<ProgressBell>() : nullptr;
  return Link{std::make_unique<TcpSender>(std::move(p.out), 1, 4, bell),
              std::make_unique<TcpReceiver>(std::move(p.in), 0, 4096, 4, bell)};
}

// The link's failures, inline and with I/O threads.
class TcpLink : public ::testing::TestWithParam<bool> {};

// Polls try_recv until it returns or throws (at most ~5 s).
const void* recv_until(TcpReceiver& r) {
  for (int i = 0; i < 5000; ++i) {
    if (const void* p = r.try_recv()) return p;
    std::this_thread::sleep_for(1ms);
  }
  return nullptr;
}

TEST_P(TcpLink, PeerClosingMidOpIsCommErrorNamingIt) {
  Link l = make_link(GetParam());
  l.receiver->expect(100);
  l.sender.reset();  // the peer process is gone: its sockets close
  try {
    recv_until(*l.receiver);
    FAIL() << "no error";
  } catch (const CommError& e) {
    EXPECT_EQ(e.rank(), 0);
    EXPECT_NE(std::string(e.what()).find("rank 0 has exited"), std::string::npos) << e.what();
  }
}

TEST_P(TcpLink, AbortFrameBlamesTheCulpritNotTheMessenger) {
  Link l = make_link(GetParam());
  l.receiver->expect(100);
  l.sender->abort(7);
  try {
    recv_until(*l.receiver);
    FAIL() << "no error";
  } catch (const CommError& e) {
    EXPECT_EQ(e.rank(), 7) << e.what();
    EXPECT_NE(std::string(e.what()).find("blaming rank 7"), std::string::npos) << e.what();
  }
}

TEST_P(TcpLink, SizeMismatchIsAClearErrorNotAHang) {
  std::vector<char> data(300, 'x');  // outlives the sender, whose threads may still read it
  Link l = make_link(GetParam());
  ASSERT_TRUE(l.sender->try_send(data.data(), 300));
  l.receiver->expect(200);  // this rank thinks the op is smaller
  try {
    recv_until(*l.receiver);
    FAIL() << "no error";
  } catch (const CommError& e) {
    EXPECT_EQ(e.rank(), 0);
    EXPECT_NE(std::string(e.what()).find("expected segment 0 of 200 bytes, got segment 0 of 300 bytes"),
              std::string::npos)
        << e.what();
  }
}

TEST_P(TcpLink, SendToAPeerThatIsGoneIsCommErrorNamingIt) {
  std::vector<char> data(4096, 'x');  // outlives the sender
  Link l = make_link(GetParam());
  l.receiver.reset();
  try {
    for (int i = 0; i < 5000; ++i) {
      l.sender->try_send(data.data(), data.size());
      l.sender->flushed();
      std::this_thread::sleep_for(1ms);
    }
    FAIL() << "no error";
  } catch (const CommError& e) {
    EXPECT_EQ(e.rank(), 1);
    EXPECT_NE(std::string(e.what()).find("rank 1 has exited"), std::string::npos) << e.what();
  }
}

// With I/O threads try_send() only queues, so a rank that has queued its
// segments and now waits on its left must learn from try_recv() that its
// right neighbour is gone (inline, the write in try_send/try_recv says it).
TEST(TcpLinkThreads, ARankWaitingOnTheLeftLearnsThatTheRightIsGone) {
  std::vector<char> data(16 << 20, 'x');  // more than the socket buffers hold; outlives the sender
  Pair to_right = connect_pair(0, 1, 1);   // this rank (0) -> rank 1
  Pair from_left = connect_pair(2, 0, 1);  // rank 2 -> this rank: nothing ever comes
  auto bell = std::make_shared<ProgressBell>();
  TcpTransport t(std::make_unique<TcpSender>(std::move(to_right.out), 1, 4, bell),
                 std::make_unique<TcpReceiver>(std::move(from_left.in), 2, 4096, 4, bell), bell);
  to_right.in.clear();  // rank 1 is gone: its ends of the streams close
  auto send = t.send_link();
  auto recv = t.recv_link();
  ASSERT_TRUE(send->try_send(data.data(), data.size()));
  recv->expect(100);
  try {
    for (int i = 0; i < 5000; ++i) {
      ASSERT_EQ(recv->try_recv(), nullptr);
      std::this_thread::sleep_for(1ms);
    }
    FAIL() << "no error";
  } catch (const CommError& e) {
    EXPECT_EQ(e.rank(), 1) << e.what();
    EXPECT_NE(std::string(e.what()).find("rank 1 has exited"), std::string::npos) << e.what();
  }
}

TEST_P(TcpLink, ZeroCopySendsLargeSegmentsAcrossTwoStreams) {
  std::vector<uint32_t> src(16u << 20 >> 2);  // outlives the sender
  Pair p = connect_pair(0, 1, 2);
  auto bell = GetParam() ? std::make_shared<ProgressBell>() : nullptr;
  TcpSender sender(std::move(p.out), 1, 4, bell);
  TcpReceiver receiver(std::move(p.in), 0, 1 << 20, 4, bell);
  std::iota(src.begin(), src.end(), 0u);
  const std::size_t seg = 1 << 20, n = src.size() * 4 / seg;
  for (std::size_t i = 0; i < n; ++i) receiver.expect(seg);
  std::size_t sent = 0, got = 0, wrong = 0;
  const auto until = std::chrono::steady_clock::now() + 10s;
  while (got < n && std::chrono::steady_clock::now() < until) {
    if (sent < n && sender.try_send(reinterpret_cast<char*>(src.data()) + sent * seg, seg)) ++sent;
    sender.flushed();
    if (const void* q = receiver.try_recv()) {
      wrong += std::memcmp(q, reinterpret_cast<char*>(src.data()) + got * seg, seg) != 0;
      receiver.release();
      ++got;
    }
  }
  EXPECT_EQ(got, n);
  EXPECT_EQ(wrong, 0u);
  // The receiver has every byte; with I/O threads the sender's thread may
  // not yet have noted its last write done (CI once saw false here).
  const auto flush_until = std::chrono::steady_clock::now() + 5s;
  while (!sender.flushed() && std::chrono::steady_clock::now() < flush_until) std::this_thread::yield();
  EXPECT_TRUE(sender.flushed());
}

INSTANTIATE_TEST_SUITE_P(Modes, TcpLink, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& i) { return i.param ? "io_threads" : "inline"; });

// --- bootstrap ---

Socket raw_connect(const Listener& l) {
  Socket s(::socket(AF_INET, SOCK_STREAM, 0));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr = l.address();
  a.sin_port = htons(l.port());
  EXPECT_EQ(connect(s.fd(), reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  return s;
}

std::string accept_error(const Listener& l) {
  try {
    accept_streams(l, 0, 1, kToken, 1, soon(2000ms));
  } catch (const CommError& e) {
    EXPECT_EQ(e.rank(), 0) << e.what();
    return e.what();
  }
  return "no error";
}

TEST(TcpBootstrap, GarbageHelloIsRejectedSayingWhy) {
  Listener l = Listener::open(loopback());
  Socket s = raw_connect(l);
  const char junk[32] = "GET / HTTP/1.0\r\n\r\n";
  ASSERT_EQ(send(s.fd(), junk, sizeof junk, 0), 32);
  const std::string e = accept_error(l);
  EXPECT_NE(e.find("bad hello"), std::string::npos) << e;
  EXPECT_NE(e.find("not a muster ring or mesh stream"), std::string::npos) << e;
  EXPECT_NE(e.find("127.0.0.1:"), std::string::npos) << e;
}

TEST(TcpBootstrap, HelloFromAnotherJobOrRankIsRejected) {
  {
    Listener l = Listener::open(loopback());
    Hello h;
    h.from = 0;
    h.to = 1;
    h.token = kToken + 1;
    Socket s = connect_stream(l.address(), l.port(), 1, h, soon());
    EXPECT_NE(accept_error(l).find("another job (token mismatch)"), std::string::npos);
  }
  {
    Listener l = Listener::open(loopback());
    Hello h;
    h.from = 2;
    h.to = 1;
    h.token = kToken;
    Socket s = connect_stream(l.address(), l.port(), 1, h, soon());
    EXPECT_NE(accept_error(l).find("says rank 2 -> rank 1, expected rank 0 -> rank 1"), std::string::npos);
  }
}

TEST(TcpBootstrap, ShortHelloThenCloseIsAnError) {
  Listener l = Listener::open(loopback());
  {
    Socket s = raw_connect(l);
    ASSERT_EQ(send(s.fd(), "MUST", 4, 0), 4);
  }
  EXPECT_NE(accept_error(l).find("closed after 4 of the hello's 32 bytes"), std::string::npos);
}

TEST(TcpBootstrap, PeerThatNeverConnectsTimesOutNamingIt) {
  Listener l = Listener::open(loopback());
  try {
    accept_streams(l, 3, 0, kToken, 1, soon(200ms));
    FAIL() << "no error";
  } catch (const TimeoutError& e) {
    EXPECT_EQ(e.rank(), 3);
    EXPECT_NE(std::string(e.what()).find("rank 3 did not connect"), std::string::npos) << e.what();
  }
}

TEST(TcpBootstrap, RefusedConnectionNamesThePeerAndEndpoint) {
  uint16_t port;
  {
    Listener l = Listener::open(loopback());
    port = l.port();
  }  // closed: nothing listens there now
  try {
    connect_stream(loopback(), port, 5, Hello{}, soon());
    FAIL() << "no error";
  } catch (const CommError& e) {
    EXPECT_EQ(e.rank(), 5);
    EXPECT_NE(std::string(e.what()).find("rank 5 at 127.0.0.1:" + std::to_string(port)), std::string::npos)
        << e.what();
  }
}

// --- interface choice ---

Interface iface(const char* name, const char* addr, bool up = true, bool lo = false) {
  Interface i;
  i.name = name;
  inet_pton(AF_INET, addr, &i.address);
  i.up = up;
  i.loopback = lo;
  return i;
}

std::string text(in_addr a) {
  char buf[INET_ADDRSTRLEN];
  inet_ntop(AF_INET, &a, buf, sizeof buf);
  return buf;
}

TEST(TcpInterfaces, ChoosesByNameSubnetOrDefault) {
  const std::vector<Interface> ifs = {iface("lo", "127.0.0.1", true, true), iface("eth0", "192.168.1.5", false),
                                      iface("eth1", "10.217.3.4"), iface("ib0", "10.9.0.2")};
  EXPECT_EQ(text(choose_address("ib0", ifs, false)), "10.9.0.2");
  EXPECT_EQ(text(choose_address("eth9,ib0", ifs, false)), "10.9.0.2");
  EXPECT_EQ(text(choose_address("10.217.3.0/24", ifs, false)), "10.217.3.4");
  EXPECT_EQ(text(choose_address("", ifs, false)), "10.217.3.4");  // eth0 is down
  EXPECT_EQ(text(choose_address("", ifs, true)), "127.0.0.1");
  EXPECT_EQ(text(choose_address("lo", ifs, false)), "127.0.0.1");
}

TEST(TcpInterfaces, NoMatchOrBadSpecIsAClearError) {
  const std::vector<Interface> ifs = {iface("lo", "127.0.0.1", true, true), iface("eth0", "10.1.2.3")};
  try {
    choose_address("eth7", ifs, false);
    FAIL();
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("'eth7'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("eth0 10.1.2.3"), std::string::npos) << e.what();
  }
  EXPECT_THROW(choose_address("10.0.0.0/40", ifs, false), InvalidArgument);
  EXPECT_THROW(choose_address("10.0.0/8", ifs, false), InvalidArgument);
  EXPECT_THROW(choose_address(",", ifs, false), InvalidArgument);
  EXPECT_THROW(choose_address("", {iface("lo", "127.0.0.1", true, true)}, false), InvalidArgument);
}

TEST(TcpInterfaces, ThisMachineHasLoopback) {
  bool found = false;
  for (const auto& i : local_interfaces()) found |= i.loopback && text(i.address) == "127.0.0.1";
  EXPECT_TRUE(found);
}

}  // namespace
}  // namespace muster::runtime::comm::tcp

// --- MUSTER_COMM_TCP_THREADS ---

TEST(TcpThreadsEnv, ReadsAutoOnOffAndNamesABadValue) {
  const auto with = [](const char* v) {
    setenv("MUSTER_COMM_TCP_THREADS", v, 1);
    return muster::runtime::comm::apply_env(muster::runtime::comm::CommOptions{}).tcp_threads;
  };
  EXPECT_EQ(with("1"), muster::runtime::comm::CommOptions::TcpThreads::kOn);
  EXPECT_EQ(with("0"), muster::runtime::comm::CommOptions::TcpThreads::kOff);
  EXPECT_EQ(with("auto"), muster::runtime::comm::CommOptions::TcpThreads::kAuto);
  try {
    with("yes");
    ADD_FAILURE() << "no error";
  } catch (const muster::runtime::InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("MUSTER_COMM_TCP_THREADS=yes: expected auto, 0 or 1"), std::string::npos)
        << e.what();
  }
  unsetenv("MUSTER_COMM_TCP_THREADS");
}

// --- MUSTER_COMM_TCP_STREAMS ---

TEST(TcpStreamsEnv, ReadsAutoAndCountsAndNamesABadValue) {
  using muster::runtime::comm::CommOptions;
  const auto with = [](const char* v) {
    setenv("MUSTER_COMM_TCP_STREAMS", v, 1);
    return muster::runtime::comm::apply_env(CommOptions{}).tcp_streams;
  };
  EXPECT_EQ(CommOptions{}.tcp_streams, CommOptions::kAutoTcpStreams);  // resolved at formation
  EXPECT_EQ(with("auto"), CommOptions::kAutoTcpStreams);
  EXPECT_EQ(with("1"), 1);
  EXPECT_EQ(with("4"), 4);
  for (const char* bad : {"0", "65", "two"}) {
    try {
      with(bad);
      ADD_FAILURE() << "no error for " << bad;
    } catch (const muster::runtime::InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("MUSTER_COMM_TCP_STREAMS"), std::string::npos) << e.what();
    }
  }
  unsetenv("MUSTER_COMM_TCP_STREAMS");
}
