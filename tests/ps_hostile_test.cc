// muster-ps against hostile clients: a PS with a secret and tight limits is
// attacked over raw sockets (no secret, wrong secret, a huge declared
// length, a second hello, a spoofed DONE, a pull of a slice that never
// exists, too many connections, garbage, slow partial frames), and in every
// case a real two-worker sync training run still completes afterwards with
// the same result as one process training on the concatenated batches.
#include <atomic>
#include <chrono>
#include <fstream>
#include <functional>
#include <random>
#include <thread>

#include <boost/asio.hpp>
#include <gtest/gtest.h>

#include "runtime/error.h"
#include "ps_test_model.h"

namespace muster::runtime::ps::testing {
namespace {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using namespace std::chrono_literals;

constexpr const char* kSecret = "0123456789abcdef0123456789abcdef";
constexpr float kLr = 0.05f;
constexpr int kBatch = 2;

ServerOptions hostile_options() {
  ServerOptions o;
  o.host = "127.0.0.1";
  o.timeout_ms = 20000;
  o.secret = kSecret;
  o.max_connections = 6;
  o.hello_timeout_ms = 400;
  o.frame_timeout_ms = 400;
  o.max_frame_bytes = uint64_t{256} << 20;
  return o;
}

// A raw TCP client speaking (or abusing) the protocol.
class Raw {
 public:
  explicit Raw(unsigned short port) : sock_(io_) { sock_.connect({asio::ip::make_address("127.0.0.1"), port}); }
  void send(const std::vector<unsigned char>& bytes) {
    boost::system::error_code ec;
    asio::write(sock_, asio::buffer(bytes), ec);
  }
  // Reads until the server closes or `wait` passes; true when closed. Any
  // kError frame's message lands in error().
  bool closed_within(std::chrono::milliseconds wait) {
    bool closed = false;
    std::function<void()> more = [&] {
      sock_.async_read_some(asio::buffer(chunk_), [&](boost::system::error_code ec, std::size_t n) {
        got_.insert(got_.end(), chunk_.begin(), chunk_.begin() + static_cast<long>(n));
        if (ec) {
          closed = true;
          return;
        }
        more();
      });
    };
    more();
    io_.restart();
    io_.run_for(wait);
    const bool result = closed;
    if (!closed) {
      sock_.cancel();
      io_.restart();
      io_.run();
    }
    return result;
  }
  std::string error() const {
    if (got_.size() < kHeaderSize) return "";
    FrameHeader h = decode_header(got_.data());
    if (h.op != Op::kError) return "";
    return std::string(got_.begin() + kHeaderSize, got_.begin() + kHeaderSize + std::min<std::size_t>(h.length, got_.size() - kHeaderSize));
  }

 private:
  asio::io_context io_;
  tcp::socket sock_;
  std::array<unsigned char, 4096> chunk_{};
  std::vector<unsigned char> got_;
};

std::vector<unsigned char> frame(FrameHeader h, std::size_t payload = 0) {
  auto b = encode_header(h);
  std::vector<unsigned char> out(b.begin(), b.end());
  out.resize(out.size() + payload);
  return out;
}

std::vector<unsigned char> hello(uint32_t worker, const std::string& secret, uint32_t streams = 1) {
  HelloPayload p;
  p.worker_index = worker;
  p.streams = streams;
  p.replicas_to_aggregate = 2;
  p.total_num_replicas = 2;
  p.learning_rate = kLr;
  p.secret = secret;
  FrameHeader h;
  h.op = Op::kHello;
  h.slice = worker;
  h.length = hello_size(p);
  auto out = frame(h);
  out.resize(kHeaderSize + hello_size(p));
  encode_hello(p, out.data() + kHeaderSize);
  return out;
}

std::vector<unsigned char> operator+(std::vector<unsigned char> a, const std::vector<unsigned char>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// Two workers train `steps` sync steps against `ps` with `secret`; `during`
// runs once both have initialised and before they train. Asserts the
// training outcome and that the PS finishes.
void train_two_workers(PsServer& ps, const std::string& secret, const std::function<void()>& during = nullptr,
                       int64_t steps = 6) {
  std::vector<Model> models(2);
  std::vector<std::string> errors(2);
  std::vector<int64_t> final_step(2, -1);
  std::atomic<int> ready{0};
  std::atomic<bool> go{false};
  std::vector<std::thread> threads;
  for (int i = 0; i < 2; ++i) {
    threads.emplace_back([&, i] {
      try {
        PsCluster c;
        c.ps = {"127.0.0.1:" + std::to_string(ps.port())};
        c.workers = {"127.0.0.1:1", "127.0.0.1:2"};
        c.task_index = i;
        ClientOptions opt = small_slices({});
        opt.learning_rate = kLr;
        opt.secret = secret;
        opt.timeout_ms = 20000;
        opt.streams = 1;  // one connection each: the limit cases count them
        SyncReplicasClient client(c, opt);
        Model& m = models[i];
        client.register_variables({{"w", m.w.data(), m.w.size()}, {"b", m.b.data(), m.b.size()}});
        int64_t step = client.initialize_or_wait();
        ++ready;
        while (!go) std::this_thread::sleep_for(1ms);
        std::vector<float> dw, db;
        while (step < steps) {
          gradients(m, step, i * kBatch, kBatch, &dw, &db);
          step = client.step({dw.data(), db.data()});
        }
        final_step[i] = step;
        client.done();
      } catch (const std::exception& e) {
        errors[i] = e.what();
        ++ready;
      }
    });
  }
  while (ready < 2) std::this_thread::sleep_for(1ms);
  if (during) during();
  go = true;
  for (auto& t : threads) t.join();
  Model expected = reference("sgd", kLr, steps, 2 * kBatch);
  for (int i = 0; i < 2; ++i) {
    ASSERT_EQ(errors[i], "") << "worker " << i;
    EXPECT_EQ(final_step[i], steps);
    EXPECT_LT(max_abs_diff(models[i].w, expected.w), 1e-4f) << "worker " << i;
  }
  ASSERT_TRUE(ps.wait_for(10000)) << "the PS did not finish after both workers were done";
  EXPECT_NO_THROW(ps.wait());
  EXPECT_EQ(ps.stats().workers_done, 2);
}

long rss_kib() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stol(line.substr(6));
  }
  return -1;
}

TEST(PsHostile, HelloWithoutOrWithAWrongSecretIsRefused) {
  PsServer ps(hostile_options());
  ps.start();
  for (const std::string secret : {"", "0123456789abcdef0123456789abcdeX", "short"}) {
    Raw r(ps.port());
    r.send(hello(1, secret));
    EXPECT_TRUE(r.closed_within(3s)) << "secret '" << secret << "'";
    EXPECT_NE(r.error().find("wrong or missing secret"), std::string::npos) << r.error();
  }
  EXPECT_EQ(ps.stats().auth_failures, 3u);
  // A real client with the wrong secret fails with that reason.
  PsCluster c;
  c.ps = {"127.0.0.1:" + std::to_string(ps.port())};
  c.workers = {"127.0.0.1:1", "127.0.0.1:2"};
  ClientOptions opt;
  opt.secret = "not-the-secret";
  opt.timeout_ms = 5000;
  Model m;
  SyncReplicasClient bad(c, opt);
  bad.register_variables({{"w", m.w.data(), m.w.size()}});
  try {
    bad.initialize_or_wait();
    ADD_FAILURE() << "a client with the wrong secret was served";
  } catch (const CommError& e) {
    EXPECT_NE(std::string(e.what()).find("secret"), std::string::npos) << e.what();
  }
  train_two_workers(ps, kSecret);
}

TEST(PsHostile, HugeDeclaredInitLengthAllocatesNothingUntilItArrives) {
  PsServer ps(hostile_options());
  ps.start();
  const long before = rss_kib();
  std::vector<std::unique_ptr<Raw>> conns;
  for (int i = 0; i < 3; ++i) {  // 3 x 256 MiB declared, 4 KiB sent each
    FrameHeader init;
    init.op = Op::kInit;
    init.dtype = 1;
    init.slice = 5000 + i;
    init.length = uint64_t{256} << 20;
    conns.push_back(std::make_unique<Raw>(ps.port()));
    conns.back()->send(hello(0, kSecret) + frame(init, 4096));
  }
  // Each connection holds its first piece once its header is through.
  for (int i = 0; i < 300 && ps.stats().init_bytes_buffered < 3 * kPayloadPieceBytes; ++i) std::this_thread::sleep_for(10ms);
  const auto held = ps.stats().init_bytes_buffered;
  EXPECT_GT(held, 0u);
  EXPECT_LE(held, 3 * kPayloadPieceBytes);
  EXPECT_LT(rss_kib() - before, 32 * 1024) << "KiB of RSS grew for 768 MiB declared";
  // Stalled payloads hit the frame timeout; the buffers go with them.
  for (auto& c : conns) EXPECT_TRUE(c->closed_within(3s));
  EXPECT_EQ(ps.stats().init_bytes_buffered, 0u);
  EXPECT_EQ(ps.stats().timed_out, 3u);
  // A declared length beyond the hard cap is refused from the header alone.
  FrameHeader huge;
  huge.op = Op::kInit;
  huge.dtype = 1;
  huge.length = uint64_t{1} << 40;
  Raw r(ps.port());
  r.send(hello(0, kSecret) + frame(huge));
  EXPECT_TRUE(r.closed_within(3s));
  train_two_workers(ps, kSecret);
}

TEST(PsHostile, HelloClaimingTooManyConnectionsIsRefusedSayingWhy) {
  PsServer ps(hostile_options());
  ps.start();
  Raw r(ps.port());
  r.send(hello(1, kSecret, 200));
  EXPECT_TRUE(r.closed_within(3s));
  EXPECT_NE(r.error().find("hello: 200 connections from one worker; expected 1..16"), std::string::npos) << r.error();
  train_two_workers(ps, kSecret);
}

TEST(PsHostile, SecondHelloClosesTheConnection) {
  PsServer ps(hostile_options());
  ps.start();
  Raw r(ps.port());
  r.send(hello(1, kSecret) + hello(1, kSecret));
  EXPECT_TRUE(r.closed_within(3s));
  EXPECT_EQ(ps.stats().bad_frames, 1u);
  train_two_workers(ps, kSecret);
}

TEST(PsHostile, DoneForAnotherWorkerIsRejectedAndNotCounted) {
  PsServer ps(hostile_options());
  ps.start();
  train_two_workers(ps, kSecret, [&] {
    FrameHeader done;
    done.op = Op::kDone;
    done.slice = 0;  // claims the chief's DONE on worker 1's connection
    Raw r(ps.port());
    r.send(hello(1, kSecret) + frame(done));
    EXPECT_TRUE(r.closed_within(3s));
    EXPECT_EQ(ps.stats().workers_done, 0);
    EXPECT_EQ(ps.stats().bad_frames, 1u);
  });
}

TEST(PsHostile, InitAndStatePullFromANonChiefAreRejected) {
  PsServer ps(hostile_options());
  ps.start();
  train_two_workers(ps, kSecret, [&] {
    FrameHeader init;
    init.op = Op::kInit;
    init.dtype = 1;
    init.slice = 0;
    init.length = 16;
    Raw a(ps.port());
    a.send(hello(1, kSecret) + frame(init, 16));
    EXPECT_TRUE(a.closed_within(3s));
    FrameHeader state;
    state.op = Op::kPullState;
    Raw b(ps.port());
    b.send(hello(1, kSecret) + frame(state));
    EXPECT_TRUE(b.closed_within(3s));
  });
}

TEST(PsHostile, PullOfASliceThatNeverExistsFailsOnlyThatConnection) {
  PsServer ps(hostile_options());
  ps.start();
  FrameHeader pull;
  pull.op = Op::kPull;
  pull.slice = 99999;
  // Before the chief has initialised: waits, then fails once the chief's
  // inits are complete (not after the job's timeout, not the job).
  Raw early(ps.port());
  early.send(hello(1, kSecret) + frame(pull));
  train_two_workers(ps, kSecret, [&] {
    EXPECT_TRUE(early.closed_within(3s));
    EXPECT_NE(early.error().find("slice 99999, which does not exist"), std::string::npos) << early.error();
    Raw late(ps.port());  // after: fails at once
    const auto t0 = std::chrono::steady_clock::now();
    late.send(hello(1, kSecret) + frame(pull));
    EXPECT_TRUE(late.closed_within(3s));
    EXPECT_LT(std::chrono::steady_clock::now() - t0, 2s);
    EXPECT_NE(late.error().find("does not exist"), std::string::npos) << late.error();
  });
}

TEST(PsHostile, SilentConnectionsAtTheLimitAreEvictedForRealWorkers) {
  ServerOptions o = hostile_options();  // max_connections 6
  o.hello_timeout_ms = 5000;              // evicted, not timed out
  PsServer ps(o);
  ps.start();
  std::vector<std::unique_ptr<Raw>> silent;
  for (int i = 0; i < 6; ++i) silent.push_back(std::make_unique<Raw>(ps.port()));
  std::this_thread::sleep_for(50ms);
  EXPECT_EQ(ps.stats().open_connections, 6);
  train_two_workers(ps, kSecret);
  EXPECT_GE(ps.stats().refused, 2u);
}

TEST(PsHostile, ConnectionsBeyondTheLimitAreClosedAtOnce) {
  PsServer ps(hostile_options());
  ps.start();
  std::vector<std::unique_ptr<Raw>> squatters;  // authenticated, idle: never evicted
  for (int i = 0; i < 4; ++i) {
    squatters.push_back(std::make_unique<Raw>(ps.port()));
    squatters.back()->send(hello(1, kSecret));
  }
  train_two_workers(ps, kSecret, [&] {  // 4 + the 2 workers: at the limit
    Raw extra(ps.port());
    const auto t0 = std::chrono::steady_clock::now();
    EXPECT_TRUE(extra.closed_within(3s));
    EXPECT_LT(std::chrono::steady_clock::now() - t0, 1s);
    EXPECT_EQ(ps.stats().refused, 1u);
    EXPECT_EQ(ps.stats().open_connections, 6);
  });
}

TEST(PsHostile, GarbageFramesCloseOnlyTheirConnections) {
  PsServer ps(hostile_options());
  ps.start();
  train_two_workers(ps, kSecret, [&] {
    std::mt19937 rng(7);
    for (int i = 0; i < 10; ++i) {
      std::vector<unsigned char> junk(32 + rng() % 300);
      for (auto& b : junk) b = static_cast<unsigned char>(rng());
      Raw r(ps.port());
      r.send(i % 2 ? junk : hello(1, kSecret) + junk);  // before and after a valid hello
      EXPECT_TRUE(r.closed_within(3s)) << "junk " << i;
    }
  });
}

TEST(PsHostile, SlowPartialFramesTimeOutButIdleWorkersDoNot) {
  PsServer ps(hostile_options());  // hello and frame timeouts 400 ms
  ps.start();
  Raw idle(ps.port());  // a worker between frames: never timed out
  idle.send(hello(1, kSecret));
  auto h = hello(1, kSecret);
  Raw half_hello(ps.port());
  half_hello.send({h.begin(), h.begin() + 40});
  FrameHeader push;
  push.op = Op::kPush;
  push.dtype = 1;
  auto p = frame(push);
  Raw half_header(ps.port());
  half_header.send(hello(1, kSecret) + std::vector<unsigned char>(p.begin(), p.begin() + 12));
  Raw nothing(ps.port());  // connects and never says hello
  for (Raw* r : {&half_hello, &half_header, &nothing}) EXPECT_TRUE(r->closed_within(3s));
  EXPECT_EQ(ps.stats().timed_out, 3u);
  EXPECT_FALSE(idle.closed_within(1s)) << "an idle authenticated connection was closed";
  train_two_workers(ps, kSecret);
}

TEST(PsHostile, WithoutASecretAnyClientIsServed) {
  ServerOptions o = hostile_options();
  o.secret.clear();
  PsServer ps(o);
  ps.start();
  train_two_workers(ps, "");
}

}  // namespace
}  // namespace muster::runtime::ps::testing
