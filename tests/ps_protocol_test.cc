// The PS wire format, placement, and a server fed malformed frames while a
// good worker keeps training.
#include <atomic>
#include <random>
#include <thread>

#include <boost/asio.hpp>
#include <gtest/gtest.h>

#include "runtime/error.h"
#include "runtime/ps/placement.h"
#include "runtime/ps/protocol.h"
#include "ps_test_model.h"

namespace muster::runtime::ps::testing {
namespace {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;

TEST(PsProtocol, HeaderIsLittleEndianAndRoundTrips) {
  FrameHeader h;
  h.op = Op::kPush;
  h.dtype = 1;
  h.slice = 0x01020304;
  h.step = -2;
  h.length = 0x1122334455667788ull;
  auto b = encode_header(h);
  EXPECT_EQ(b.size(), 32u);
  EXPECT_EQ(b[0], 0x4d);  // 'M'
  EXPECT_EQ(b[3], 0x53);
  EXPECT_EQ(b[4], 1);
  EXPECT_EQ(b[6], 3);
  EXPECT_EQ(b[8], 0x04);
  EXPECT_EQ(b[24], 0x88);
  EXPECT_EQ(b[31], 0x11);
  FrameHeader d = decode_header(b.data());
  EXPECT_EQ(d.magic, kMagic);
  EXPECT_EQ(d.op, Op::kPush);
  EXPECT_EQ(d.slice, h.slice);
  EXPECT_EQ(d.step, -2);
  EXPECT_EQ(d.length, h.length);

  HelloPayload hello;
  hello.worker_index = 3;
  hello.replicas_to_aggregate = 2;
  hello.total_num_replicas = 4;
  hello.mode = Mode::kAsync;
  hello.learning_rate = 0.125f;
  hello.optimizer = "adam";
  unsigned char buf[kHelloSize];
  encode_hello(hello, buf);
  HelloPayload back = decode_hello(buf);
  EXPECT_EQ(back.worker_index, 3u);
  EXPECT_TRUE(same_options(hello, back));
  EXPECT_EQ(back.secret, "");
  EXPECT_EQ(back.streams, 1u);
  hello.streams = 5;  // byte 13; a hello from before it (0 there) reads as 1
  encode_hello(hello, buf);
  EXPECT_EQ(buf[13], 5);
  EXPECT_EQ(decode_hello(buf).streams, 5u);
  EXPECT_TRUE(same_options(hello, back)) << "workers may open different numbers of connections";
  buf[13] = 0;
  EXPECT_EQ(decode_hello(buf).streams, 1u);
  hello.streams = 1;

  hello.secret = "c0ffee";
  std::vector<unsigned char> with(hello_size(hello));
  ASSERT_EQ(with.size(), kHelloSize + 6);
  encode_hello(hello, with.data());
  EXPECT_EQ(decode_hello(with.data(), with.size()).secret, "c0ffee");
  EXPECT_THROW(decode_hello(with.data(), kHelloSize - 1), InvalidArgument);
  EXPECT_THROW(decode_hello(with.data(), kHelloSize + kMaxSecretBytes + 1), InvalidArgument);
  hello.secret.assign(kMaxSecretBytes + 1, 'x');
  EXPECT_THROW(hello_size(hello), InvalidArgument);
}

TEST(PsProtocol, SecretsCompareWholeAndExact) {
  EXPECT_TRUE(secrets_equal("abc", "abc"));
  EXPECT_FALSE(secrets_equal("abc", "abd"));
  EXPECT_FALSE(secrets_equal("abc", "ab"));
  EXPECT_FALSE(secrets_equal("abc", "abcd"));
  EXPECT_FALSE(secrets_equal("abc", ""));
  EXPECT_TRUE(secrets_equal("", ""));
}

TEST(PsPlacement, BalancesBytesAndSplitsLargeVariables) {
  std::vector<VariableSpec> vars{{"embedding", 1000000}, {"w1", 300000}, {"w2", 200000}, {"b1", 300}, {"b2", 10}};
  for (int n_ps : {1, 2, 3, 4}) {
    PlacementOptions o;
    Placement p = place(vars, n_ps, o);
    std::size_t total = 0;
    for (auto& v : vars) total += v.size * 4;
    std::size_t share = total / n_ps, max_slice = 0;
    std::vector<std::size_t> covered(vars.size(), 0);
    for (std::size_t i = 0; i < p.slices.size(); ++i) {
      const auto& s = p.slices[i];
      EXPECT_EQ(s.id, i);
      max_slice = std::max(max_slice, s.size * 4);
      covered[s.variable] += s.size;
    }
    for (std::size_t v = 0; v < vars.size(); ++v) EXPECT_EQ(covered[v], vars[v].size) << "every element placed once";
    for (auto b : p.bytes_per_ps) EXPECT_LE(b, share + max_slice) << n_ps << " ps tasks";
    if (n_ps > 1) {
      EXPECT_GT(p.slices.size(), vars.size()) << "the embedding must be split";
    }
    // Deterministic: the same list gives the same placement.
    Placement again = place(vars, n_ps, o);
    ASSERT_EQ(again.slices.size(), p.slices.size());
    for (std::size_t i = 0; i < p.slices.size(); ++i) {
      EXPECT_EQ(again.slices[i].ps, p.slices[i].ps);
      EXPECT_EQ(again.slices[i].offset, p.slices[i].offset);
    }
  }
  EXPECT_THROW(place(vars, 0, {}), InvalidArgument);
  EXPECT_THROW(place({{"empty", 0}}, 1, {}), InvalidArgument);
}

// Sends `bytes` on a fresh connection and reports whether the server closed
// it (EOF/reset) within 5 s.
bool server_closes_after(unsigned short port, const std::vector<unsigned char>& bytes, bool close_after_send = false) {
  asio::io_context io;
  tcp::socket s(io);
  s.connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), port));
  asio::write(s, asio::buffer(bytes));
  if (close_after_send) {
    s.shutdown(tcp::socket::shutdown_send);
  }
  // Wait for EOF from the server (any error frame is read and skipped).
  std::atomic<bool> closed{false};
  std::vector<unsigned char> sink(4096);
  std::function<void()> read_some = [&] {
    s.async_read_some(asio::buffer(sink), [&](boost::system::error_code ec, std::size_t) {
      if (ec) {
        closed = true;
        return;
      }
      read_some();
    });
  };
  read_some();
  io.run_for(std::chrono::seconds(5));
  return closed;
}

std::vector<unsigned char> frame(FrameHeader h, std::size_t payload_bytes = 0, unsigned char fill = 0) {
  auto b = encode_header(h);
  std::vector<unsigned char> out(b.begin(), b.end());
  out.resize(out.size() + payload_bytes, fill);
  return out;
}

std::vector<unsigned char> hello_frame(const ClientOptions& o, uint32_t worker) {
  HelloPayload p;
  p.worker_index = worker;
  p.replicas_to_aggregate = 1;
  p.total_num_replicas = 1;
  p.learning_rate = o.learning_rate;
  p.optimizer = o.optimizer;
  FrameHeader h;
  h.op = Op::kHello;
  h.length = kHelloSize;
  auto out = frame(h);
  out.resize(kHeaderSize + kHelloSize);
  encode_hello(p, out.data() + kHeaderSize);
  return out;
}

TEST(PsBadFrames, MalformedFramesCloseOnlyTheirConnection) {
  LocalPs ps(1, 20000, /*max_frame=*/1 << 20);
  const unsigned short port = ps.servers[0]->port();
  ClientOptions opt = small_slices({});
  opt.learning_rate = 0.05f;
  const int64_t steps = 60;

  // The good worker: initialises, then trains while the fuzzer runs.
  Model m;
  SyncReplicasClient client(ps.cluster(1, 0), opt);
  client.register_variables({{"w", m.w.data(), m.w.size()}, {"b", m.b.data(), m.b.size()}});
  ASSERT_EQ(client.initialize_or_wait(), 0);
  std::string worker_error;
  std::thread worker([&] {
    try {
      std::vector<float> dw, db;
      for (int64_t s = 0; s < steps; ++s) {
        gradients(m, s, 0, 4, &dw, &db);
        client.step({dw.data(), db.data()});
      }
    } catch (const std::exception& e) {
      worker_error = e.what();
    }
  });

  const auto before = ps.servers[0]->stats().bad_frames;
  int expected_bad = 0;
  auto expect_closed = [&](const std::vector<unsigned char>& bytes, const char* what, bool half_close = false) {
    EXPECT_TRUE(server_closes_after(port, bytes, half_close)) << what;
    ++expected_bad;
  };
  std::mt19937 rng(42);
  for (int i = 0; i < 20; ++i) {  // random bytes
    std::vector<unsigned char> junk(32 + rng() % 200);
    for (auto& b : junk) b = static_cast<unsigned char>(rng());
    junk[0] ^= 0x80;  // never the magic
    expect_closed(junk, "random bytes");
  }
  FrameHeader good;
  good.op = Op::kHello;
  good.length = kHelloSize;
  auto truncated = frame(good);
  truncated.resize(10);
  expect_closed(truncated, "truncated header", true);
  FrameHeader bad = good;
  bad.magic = 0xdeadbeef;
  expect_closed(frame(bad, kHelloSize), "wrong magic");
  bad = good;
  bad.version = 9;
  expect_closed(frame(bad, kHelloSize), "wrong version");
  bad = good;
  bad.op = static_cast<Op>(99);
  expect_closed(frame(bad), "unknown op");
  bad = good;
  bad.dtype = 77;
  expect_closed(frame(bad, kHelloSize), "unknown dtype");
  bad = good;
  bad.op = Op::kParams;  // a PS -> worker op sent to the PS
  expect_closed(frame(bad), "op in the wrong direction");
  bad = good;
  bad.length = uint64_t{1} << 40;
  expect_closed(frame(bad), "oversize length");
  bad = good;
  bad.op = Op::kPush;
  bad.length = 8;
  expect_closed(frame(bad, 8), "push before hello");
  bad = good;
  bad.length = kHelloSize - 4;
  expect_closed(frame(bad, kHelloSize - 4), "hello too short");
  bad.length = kHelloSize + kMaxSecretBytes + 1;
  expect_closed(frame(bad, kHelloSize + kMaxSecretBytes + 1), "hello with an oversize secret");

  // After a valid hello: a push whose length does not match the slice, a
  // push to a slice that does not exist, a truncated push, a bad dtype.
  const auto& slice0 = client.placement().slices[0];
  auto with_hello = [&](FrameHeader h, std::size_t payload) {
    auto bytes = hello_frame(opt, 0);
    auto f = frame(h, payload);
    bytes.insert(bytes.end(), f.begin(), f.end());
    return bytes;
  };
  FrameHeader push;
  push.op = Op::kPush;
  push.dtype = 1;
  push.slice = slice0.id;
  push.step = 0;
  push.length = slice0.size * 4 + 4;
  expect_closed(with_hello(push, slice0.size * 4 + 4), "mismatched push length");
  push.length = slice0.size * 4;
  push.slice = 100000;
  expect_closed(with_hello(push, slice0.size * 4), "push to an unknown slice");
  push.slice = slice0.id;
  expect_closed(with_hello(push, slice0.size * 2), "truncated push payload", true);
  push.dtype = static_cast<uint8_t>(DataType::kFloat64);
  expect_closed(with_hello(push, slice0.size * 4), "push with an unsupported dtype");
  FrameHeader pull;
  pull.op = Op::kPull;
  pull.length = 12;
  expect_closed(with_hello(pull, 12), "pull with a payload");
  // A hello with options different from the running job's.
  {
    auto bytes = hello_frame(opt, 0);
    HelloPayload p = decode_hello(bytes.data() + kHeaderSize);
    p.learning_rate = 0.5f;
    encode_hello(p, bytes.data() + kHeaderSize);
    expect_closed(bytes, "hello with other options");
  }

  worker.join();
  ASSERT_EQ(worker_error, "") << "the good worker was disturbed";
  EXPECT_EQ(client.global_step(), steps);
  Model expected = reference("sgd", 0.05f, steps, 4);
  EXPECT_LT(max_abs_diff(m.w, expected.w), 1e-4f);
  EXPECT_EQ(ps.servers[0]->stats().bad_frames - before, static_cast<uint64_t>(expected_bad));
  client.done();
  ASSERT_TRUE(ps.servers[0]->wait_for(10000));
}

}  // namespace
}  // namespace muster::runtime::ps::testing
