// base::TaskQueue, the one thread-pool type: order, a bound on waiting jobs,
// drain, close dropping what has not started, and inline mode.
#include "api/base/task_queue.h"

#include <atomic>
#include <chrono>
#include <future>
#include <vector>

#include <gtest/gtest.h>

namespace muster::base {
namespace {

using namespace std::chrono_literals;

TEST(TaskQueue, OneThreadRunsJobsInOrder) {
  TaskQueue q(1);
  std::vector<int> seen;
  for (int i = 0; i < 100; ++i) EXPECT_TRUE(q.post([&seen, i] { seen.push_back(i); }));
  q.drain();
  ASSERT_EQ(seen.size(), 100u);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(seen[static_cast<size_t>(i)], i);
}

TEST(TaskQueue, RefusesBeyondItsBoundAndAfterClose) {
  TaskQueueOptions o;
  o.threads = 1;
  o.max_queued = 2;
  TaskQueue q(o);
  std::promise<void> gate;
  auto opened = gate.get_future().share();
  std::atomic<bool> started{false};
  ASSERT_TRUE(q.post([&] {
    started = true;
    opened.wait();
  }));
  while (!started) std::this_thread::sleep_for(1ms);
  EXPECT_TRUE(q.post([] {}));
  EXPECT_TRUE(q.post([] {}));
  EXPECT_FALSE(q.post([] {})) << "a third waiting job passes max_queued";
  EXPECT_EQ(q.queued(), 2u);
  // Dropped jobs are destroyed (not run) outside the lock: a destructor may post elsewhere.
  struct Flag {
    explicit Flag(std::atomic<int>* d) : destroyed(d) {}
    std::atomic<int>* destroyed;
    ~Flag() { ++*destroyed; }
  };
  std::atomic<int> ran{0}, destroyed{0};
  TaskQueueOptions big = o;
  big.max_queued = 10;
  TaskQueue q2(big);
  std::promise<void> gate2;
  auto opened2 = gate2.get_future().share();
  std::atomic<bool> started2{false};
  ASSERT_TRUE(q2.post([&] {
    started2 = true;
    opened2.wait();
  }));
  while (!started2) std::this_thread::sleep_for(1ms);
  auto flag = std::make_shared<Flag>(&destroyed);
  ASSERT_TRUE(q2.post([&ran, flag] { ++ran; }));
  flag.reset();
  std::thread closer([&] { q2.close(); });
  std::this_thread::sleep_for(20ms);
  gate2.set_value();
  closer.join();
  EXPECT_EQ(ran.load(), 0);
  EXPECT_EQ(destroyed.load(), 1);
  EXPECT_FALSE(q2.post([] {}));
  gate.set_value();
}

TEST(TaskQueue, ZeroThreadsRunInlineAndThrowingJobsAreReported) {
  std::string reported;
  TaskQueueOptions o;
  o.threads = 0;
  o.name = "inline";
  o.on_error = [&](const std::string& what) { reported = what; };
  TaskQueue q(o);
  int n = 0;
  q.post([&] { ++n; });
  EXPECT_EQ(n, 1);
  q.post([] { throw std::runtime_error("boom"); });
  EXPECT_EQ(reported, "inline: a job threw: boom");
}

}  // namespace
}  // namespace muster::base
