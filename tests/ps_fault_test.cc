// Faults: a worker that dies without backups, a PS that dies.
#include <chrono>
#include <thread>

#include <gtest/gtest.h>

#include "runtime/error.h"
#include "ps_test_model.h"

namespace muster::runtime::ps::testing {
namespace {

using Clock = std::chrono::steady_clock;

TEST(PsFaults, WorkerDeathWithoutBackupsFailsWithATimeoutError) {
  const int timeout_ms = 3000;  // long enough that a loaded machine does not trip it during step 0
  LocalPs ps(1, timeout_ms);
  ClientOptions opt = small_slices({});
  opt.timeout_ms = timeout_ms;
  Model m0, m1;
  SyncReplicasClient w0(ps.cluster(2, 0), opt);
  w0.register_variables({{"w", m0.w.data(), m0.w.size()}, {"b", m0.b.data(), m0.b.size()}});
  std::string error;
  auto start = Clock::now();
  std::thread t0([&] {
    try {
      w0.initialize_or_wait();
      std::vector<float> dw, db;
      for (int64_t s = 0; s < 5; ++s) {
        gradients(m0, s, 0, 4, &dw, &db);
        w0.step({dw.data(), db.data()});
      }
    } catch (const TimeoutError& e) {
      error = e.what();
    }
  });
  {
    // Worker 1 takes one step, then dies.
    SyncReplicasClient w1(ps.cluster(2, 1), opt);
    w1.register_variables({{"w", m1.w.data(), m1.w.size()}, {"b", m1.b.data(), m1.b.size()}});
    w1.initialize_or_wait();
    std::vector<float> dw, db;
    gradients(m1, 0, 4, 4, &dw, &db);
    w1.step({dw.data(), db.data()});
  }
  t0.join();
  const auto elapsed = Clock::now() - start;
  EXPECT_NE(error.find("ps task 0"), std::string::npos) << error;
  EXPECT_NE(error.find("timed out"), std::string::npos) << error;
  EXPECT_NE(error.find("lost worker(s): 1"), std::string::npos) << error;
  EXPECT_LT(elapsed, std::chrono::milliseconds(timeout_ms + 8000));
  ASSERT_TRUE(ps.servers[0]->wait_for(5000));
  EXPECT_THROW(ps.servers[0]->wait(), TimeoutError) << "the PS fails too";
}

TEST(PsFaults, ABadStreamsVariableIsRefusedNamingIt) {
  LocalPs ps(1);
  setenv("MUSTER_PS_STREAMS", "zero", 1);
  ClientOptions opt;  // reads MUSTER_PS_STREAMS
  unsetenv("MUSTER_PS_STREAMS");
  try {
    SyncReplicasClient client(ps.cluster(1, 0), opt);
    FAIL() << "no error";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("MUSTER_PS_STREAMS"), std::string::npos) << e.what();
  }
  opt.streams = 17;
  EXPECT_THROW(SyncReplicasClient(ps.cluster(1, 0), opt), InvalidArgument);
}

TEST(PsFaults, PsDeathFailsWorkersWithAnErrorNamingIt) {
  LocalPs ps(2);
  ClientOptions opt = small_slices({});
  opt.timeout_ms = 3000;
  Model m;
  SyncReplicasClient client(ps.cluster(1, 0), opt);
  client.register_variables({{"w", m.w.data(), m.w.size()}, {"b", m.b.data(), m.b.size()}});
  client.initialize_or_wait();
  std::vector<float> dw, db;
  gradients(m, 0, 0, 4, &dw, &db);
  ASSERT_EQ(client.step({dw.data(), db.data()}), 1);
  ps.servers[1]->stop();
  const std::string name = "ps task 1 (" + ps.addresses()[1] + ")";
  auto start = Clock::now();
  try {
    gradients(m, 1, 0, 4, &dw, &db);
    client.step({dw.data(), db.data()});
    FAIL() << "a step with a dead PS succeeded";
  } catch (const CommError& e) {
    EXPECT_NE(std::string(e.what()).find(name), std::string::npos) << e.what();
    EXPECT_EQ(e.rank(), 1);
  }
  EXPECT_LT(Clock::now() - start, std::chrono::milliseconds(opt.timeout_ms + 3000));
  // The client stays failed rather than half-working.
  EXPECT_THROW(client.step({dw.data(), db.data()}), CommError);
}

TEST(PsFaults, UnreachablePsIsNamedAfterTheTimeout) {
  PsCluster c;
  {
    LocalPs ps(1);
    c = ps.cluster(1, 0);
  }  // gone: nothing listens there any more
  ClientOptions opt;
  opt.timeout_ms = 500;
  Model m;
  SyncReplicasClient client(c, opt);
  client.register_variables({{"w", m.w.data(), m.w.size()}});
  try {
    client.initialize_or_wait();
    FAIL() << "connected to a PS that is not there";
  } catch (const TimeoutError& e) {
    EXPECT_NE(std::string(e.what()).find("ps task 0 (" + c.ps[0] + ") not reachable"), std::string::npos) << e.what();
  }
}

TEST(PsFaults, ChiefThatNeverInitialisesTimesOut) {
  LocalPs ps(1, 800);
  ClientOptions opt;
  opt.timeout_ms = 800;
  Model m;
  SyncReplicasClient client(ps.cluster(2, 1), opt);  // worker 1 of 2: waits for the chief
  client.register_variables({{"w", m.w.data(), m.w.size()}});
  try {
    client.initialize_or_wait();
    FAIL() << "initialised without a chief";
  } catch (const TimeoutError& e) {
    EXPECT_NE(std::string(e.what()).find("not initialised by the chief"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace muster::runtime::ps::testing
