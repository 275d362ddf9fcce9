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

// A worker killed while its push of a step was being written: some slices
// got its gradient, the others did not. The live worker's push then
// completes the first kind and leaves the rest waiting at that step; its
// replacement, which has pushed nothing, must take the oldest step and
// complete them, not wait for the slices to agree until the timeout.
// (The half push: a client that registers only the first variable, whose
// slices come first in every placement, then goes away.)
TEST(PsFaults, AReplacementCompletesAStepItsPredecessorPushedHalfOf) {
  const int timeout_ms = 6000;
  LocalPs ps(1, timeout_ms);
  ClientOptions opt = small_slices({});
  opt.timeout_ms = timeout_ms;
  opt.learning_rate = 0.05f;
  Model m0, m1, half;
  SyncReplicasClient w0(ps.cluster(2, 0), opt);
  w0.register_variables({{"w", m0.w.data(), m0.w.size()}, {"b", m0.b.data(), m0.b.size()}});
  ASSERT_EQ(w0.initialize_or_wait(), 0);
  {
    SyncReplicasClient dying(ps.cluster(2, 1), opt);
    dying.register_variables({{"w", half.w.data(), half.w.size()}});
    ASSERT_EQ(dying.initialize_or_wait(), 0);
    std::vector<float> dw, db;
    gradients(half, 0, 2, 2, &dw, &db);
    dying.push_gradients(0, {dw.data()});
  }  // gone without done(), as a SIGKILL leaves it
  std::string error0;
  int64_t final0 = -1;
  std::thread t0([&] {
    try {
      std::vector<float> dw, db;
      for (int64_t s = 0; s < 4; ++s) {
        gradients(m0, w0.global_step(), 0, 2, &dw, &db);
        w0.step({dw.data(), db.data()});
      }
      final0 = w0.global_step();
      w0.done();
    } catch (const std::exception& e) {
      error0 = e.what();
    }
  });
  const auto start = Clock::now();
  std::string error1;
  int64_t first1 = -1, final1 = -1;
  try {
    SyncReplicasClient w1(ps.cluster(2, 1), opt);
    w1.register_variables({{"w", m1.w.data(), m1.w.size()}, {"b", m1.b.data(), m1.b.size()}});
    // The live worker's step 0 is in: w's slices are at step 1, b's at 0.
    for (int i = 0; i < 5000 && ps.servers[0]->global_step(0) < 1; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    first1 = w1.initialize_or_wait();
    std::vector<float> dw, db;
    while (w1.global_step() < 4) {
      gradients(m1, w1.global_step(), 2, 2, &dw, &db);
      w1.step({dw.data(), db.data()});
    }
    final1 = w1.global_step();
    w1.done();
  } catch (const std::exception& e) {
    error1 = e.what();
  }
  t0.join();
  EXPECT_EQ(error1, "") << "the replacement";
  EXPECT_EQ(error0, "") << "the live worker";
  EXPECT_EQ(first1, 0) << "the replacement starts at the oldest step its pull saw";
  EXPECT_EQ(final0, 4);
  EXPECT_EQ(final1, 4);
  EXPECT_LT(Clock::now() - start, std::chrono::milliseconds(timeout_ms)) << "it waited for the timeout";
  EXPECT_GT(ps.total().stale_dropped, 0u) << "the replacement's first gradient is stale on the slices that moved on";
  EXPECT_EQ(m0.w, m1.w) << "both workers end with the same parameters";
  EXPECT_EQ(m0.b, m1.b);
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
