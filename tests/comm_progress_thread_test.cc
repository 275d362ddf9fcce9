// ProgressThread: ops run one at a time in submission order; an op whose
// caller waits on it while nothing runs before it runs on the caller's
// thread; every other op runs on the progress thread, also one that nobody
// waits on (dropped Handle, polled Handle, held Handle: the idle tick).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <vector>

#include "runtime/comm/progress_thread.h"

namespace muster::runtime::comm {
namespace {

// Polls `cond` for up to 20 s (never a fixed sleep standing in for an event).
template <typename Cond>
bool eventually(Cond cond) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (!cond()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::yield();
  }
  return true;
}

// The waiter takes the op when it arrives within ProgressThread::kStartWithin
// (5 ms); a waiter descheduled for longer on a loaded machine finds it taken
// by the progress thread (seen once in make test -j2), so the op is asked
// for up to 100 times, and one of them must have run here: an op that never
// runs on its waiter fails every time.
TEST(ProgressThreadTest, WaitedOpRunsOnTheWaitingThread) {
  ProgressThread progress;
  bool ran_here = false;
  for (int attempt = 0; attempt < 100 && !ran_here; ++attempt) {
    std::thread::id ran_on;
    int runs = 0;
    Handle h = progress.submit([&] {
      ran_on = std::this_thread::get_id();
      ++runs;
    });
    h.wait();
    ASSERT_EQ(runs, 1);
    ran_here = ran_on == std::this_thread::get_id();
  }
  EXPECT_TRUE(ran_here) << "100 waited ops, none ran on the waiting thread";
}

TEST(ProgressThreadTest, OpsBehindOthersRunInOrderOnTheProgressThread) {
  ProgressThread progress;
  std::mutex mu;
  std::vector<int> order;
  std::vector<std::thread::id> threads(3);
  std::vector<Handle> handles;
  for (int i = 0; i < 3; ++i) {
    handles.push_back(progress.submit([&, i] {
      std::lock_guard<std::mutex> lock(mu);
      order.push_back(i);
      threads[static_cast<std::size_t>(i)] = std::this_thread::get_id();
    }));
  }
  handles[2].wait();  // the last: the others must run first, in order
  EXPECT_TRUE(handles[0].done());
  EXPECT_TRUE(handles[1].done());
  EXPECT_EQ(order, (std::vector<int>{0, 1, 2}));
  // The second submit woke the progress thread, which ran the ops nobody
  // waited on. The last one may run on either thread: if the progress
  // thread has finished the first two when wait() looks, the op is next with
  // nothing running, and the waiter takes it (progress_thread.h).
  EXPECT_NE(threads[0], std::this_thread::get_id());
  EXPECT_NE(threads[1], std::this_thread::get_id());
}

TEST(ProgressThreadTest, NothingRunsBesideAnOpOnAWaiter) {
  ProgressThread progress;
  std::atomic<int> inside{0}, overlaps{0};
  auto task = [&] {
    if (inside.fetch_add(1) != 0) overlaps.fetch_add(1);
    std::this_thread::sleep_for(std::chrono::microseconds(200));
    inside.fetch_sub(1);
  };
  for (int round = 0; round < 50; ++round) {
    Handle a = progress.submit(task);
    std::thread other([&] {
      Handle b = progress.submit(task);
      b.wait();
    });
    a.wait();
    other.join();
  }
  EXPECT_EQ(overlaps.load(), 0);
}

TEST(ProgressThreadTest, DroppedHandleStillRuns) {
  ProgressThread progress;
  std::atomic<bool> ran{false};
  progress.submit([&] { ran = true; });  // Handle dropped at once
  EXPECT_TRUE(eventually([&] { return ran.load(); }));
}

TEST(ProgressThreadTest, HeldHandleNobodyWaitsOnStartsByItself) {
  ProgressThread progress;
  std::atomic<bool> ran{false};
  Handle h = progress.submit([&] { ran = true; });
  // Neither waited on nor polled: the idle tick starts it.
  EXPECT_TRUE(eventually([&] { return ran.load(); }));
  h.wait();
}

TEST(ProgressThreadTest, PollingDoneMakesProgress) {
  ProgressThread progress;
  std::thread::id ran_on;
  Handle h = progress.submit([&] { ran_on = std::this_thread::get_id(); });
  EXPECT_TRUE(eventually([&] { return h.done(); }));
  EXPECT_NE(ran_on, std::this_thread::get_id());
}

TEST(ProgressThreadTest, ErrorsReachTheWaiterEitherWay) {
  ProgressThread progress;
  Handle inline_op = progress.submit([] { throw CommError("peer gone", 3); });
  try {
    inline_op.wait();
    FAIL() << "no error";
  } catch (const CommError& e) {
    EXPECT_EQ(e.rank(), 3);
  }
  Handle first = progress.submit([] {});
  Handle queued = progress.submit([] { throw TimeoutError("slow", 1); });
  EXPECT_THROW(queued.wait(), TimeoutError);
  first.wait();
}

// The synchronous calls' path: with nothing queued or running, the body runs
// on the caller's thread at once; otherwise it does not run (the caller
// submits instead); ops queued meanwhile run after it; its exception
// propagates and leaves the queue usable.
TEST(ProgressThreadTest, RunIfIdleRunsHereOnlyWhenNothingComesFirst) {
  ProgressThread progress;
  std::thread::id ran_on;
  EXPECT_TRUE(progress.run_if_idle([&] { ran_on = std::this_thread::get_id(); }));
  EXPECT_EQ(ran_on, std::this_thread::get_id());

  // Something queued (a held Handle nobody waits on yet): not idle. The
  // progress thread may start it within its tick; until it has, run_if_idle
  // must refuse.
  std::atomic<bool> release{false};
  std::atomic<int> ran{0};
  Handle blocker = progress.submit([&] {
    while (!release.load()) std::this_thread::yield();
  });
  bool refused = false;
  EXPECT_TRUE(eventually([&] {
    refused = !progress.run_if_idle([&] { ran.fetch_add(1); });
    return refused;  // queued or running: either way refused
  }));
  EXPECT_EQ(ran.load(), 0);
  release = true;
  blocker.wait();

  // Ops submitted from another thread while the body runs start after it.
  std::atomic<bool> inside{false}, later_ran{false};
  std::thread other;
  EXPECT_TRUE(progress.run_if_idle([&] {
    inside = true;
    other = std::thread([&] {
      Handle h = progress.submit([&] { later_ran = true; });
      h.wait();
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    EXPECT_FALSE(later_ran.load()) << "an op ran beside the inline one";
  }));
  other.join();
  EXPECT_TRUE(later_ran.load());
  // h.wait() returns once the op is done; the thread goes idle just after.
  EXPECT_TRUE(eventually([&] { return progress.run_if_idle([] {}); }));

  EXPECT_THROW(progress.run_if_idle([] { throw std::runtime_error("inline failure"); }), std::runtime_error);
  std::thread::id after;
  EXPECT_TRUE(progress.run_if_idle([&] { after = std::this_thread::get_id(); }));
  EXPECT_EQ(after, std::this_thread::get_id());
}

TEST(ProgressThreadTest, DestructorRunsWhatWasQueued) {
  std::atomic<int> ran{0};
  {
    ProgressThread progress;
    for (int i = 0; i < 10; ++i) progress.submit([&] { ran.fetch_add(1); });
  }
  EXPECT_EQ(ran.load(), 10);
}

}  // namespace
}  // namespace muster::runtime::comm
