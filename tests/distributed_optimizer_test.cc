// DistributedOptimizer with in-process ranks on threads (no MPI): averaging,
// fusion, fp16, broadcasts, mismatch detection, error propagation, timeline.
#include "runtime/distributed/distributed_optimizer.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <numeric>
#include <random>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "distributed_fake_collectives.h"
#include "distributed_test_model.h"
#include "runtime/error.h"
#include "temp_dir.h"

namespace muster::runtime::distributed {
namespace {

using testing::Batch;
using testing::FakeWorld;
using testing::LinearModel;

// Runs fn(rank, collectives) on n threads; returns each rank's exception.
std::vector<std::exception_ptr> run_ranks(FakeWorld& world,
                                          const std::function<void(int, std::unique_ptr<Collectives>)>& fn) {
  std::vector<std::exception_ptr> errors(static_cast<std::size_t>(world.size()));
  std::vector<std::thread> threads;
  for (int r = 0; r < world.size(); ++r) {
    threads.emplace_back([&, r] {
      try {
        fn(r, world.rank(r));
      } catch (...) {
        errors[static_cast<std::size_t>(r)] = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  return errors;
}

void expect_no_errors(const std::vector<std::exception_ptr>& errors) {
  for (std::size_t r = 0; r < errors.size(); ++r) {
    if (!errors[r]) continue;
    try {
      std::rethrow_exception(errors[r]);
    } catch (const std::exception& e) {
      ADD_FAILURE() << "rank " << r << ": " << e.what();
    }
  }
}

constexpr std::size_t kRows = 6;

std::vector<float> train_reference(const std::vector<std::size_t>& sizes, int ranks, int steps, float lr) {
  return testing::train_reference(sizes, ranks, steps, kRows, lr);
}

struct TrainConfig {
  std::vector<std::size_t> sizes;
  int ranks = 3;
  int steps = 5;
  bool arena = false;
  DistributedOptions options;
};

// Trains on every rank; each marks its gradients ready in its own random order.
std::vector<std::vector<float>> train_distributed(const TrainConfig& c, std::size_t* buckets = nullptr) {
  FakeWorld world(c.ranks);
  std::vector<std::vector<float>> finals(static_cast<std::size_t>(c.ranks));
  expect_no_errors(run_ranks(world, [&](int rank, std::unique_ptr<Collectives> coll) {
    LinearModel model(c.sizes, c.arena);
    DistributedOptimizer opt(std::move(coll), testing::test_momentum(0.05f), c.options);
    for (std::size_t t = 0; t < model.tensors(); ++t)
      opt.add_parameter("w" + std::to_string(t), model.value(t), model.grad(t), model.size(t));
    std::mt19937 rng(static_cast<unsigned>(rank) + 7);
    for (int s = 0; s < c.steps; ++s) {
      model.backward(testing::rank_batch(model.dim(), kRows, rank, s));
      std::vector<int> order(model.tensors());
      std::iota(order.begin(), order.end(), 0);
      std::shuffle(order.begin(), order.end(), rng);
      order.resize(order.size() * 3 / 4);  // the rest is marked by synchronize()
      for (int i : order) opt.grad_ready(i);
      opt.step();
    }
    finals[static_cast<std::size_t>(rank)] = model.flat_values();
    if (buckets && rank == 0) *buckets = opt.bucket_count();
  }));
  return finals;
}

void expect_matches_reference(const std::vector<std::vector<float>>& finals, const std::vector<float>& ref,
                              float tol) {
  for (std::size_t r = 0; r < finals.size(); ++r) {
    ASSERT_EQ(finals[r].size(), ref.size());
    EXPECT_EQ(finals[r], finals[0]) << "rank " << r << " diverged from rank 0";
    for (std::size_t i = 0; i < ref.size(); ++i) ASSERT_NEAR(finals[r][i], ref[i], tol) << "rank " << r << " w[" << i << "]";
  }
}

TEST(DistributedOptimizer, MatchesOneProcessOnTheConcatenatedBatch) {
  TrainConfig c;
  c.sizes = {5, 12, 1, 9};
  const auto finals = train_distributed(c);
  expect_matches_reference(finals, train_reference(c.sizes, c.ranks, c.steps, 0.05f), 1e-5f);
  // It actually trained: parameters moved from their start.
  LinearModel start(c.sizes, false);
  EXPECT_GT(std::abs(finals[0][3] - start.flat_values()[3]), 1e-3f);
}

TEST(DistributedOptimizer, FusesTwoHundredSmallTensorsIntoSeveralBuckets) {
  TrainConfig c;
  for (std::size_t t = 0; t < 200; ++t) c.sizes.push_back(1 + (t * 7) % 13);
  c.ranks = 2;
  c.steps = 3;
  c.options.fusion_threshold_bytes = 256;  // 64 floats per bucket
  c.options.segment_bytes = 40;            // 10 floats per allreduce, cutting tensors
  std::size_t buckets = 0;
  const auto finals = train_distributed(c, &buckets);
  EXPECT_GT(buckets, 10u);
  EXPECT_LT(buckets, 200u);
  expect_matches_reference(finals, train_reference(c.sizes, c.ranks, c.steps, 0.05f), 1e-5f);
}

TEST(DistributedOptimizer, InPlaceBucketsGiveTheSameResult) {
  TrainConfig c;
  for (std::size_t t = 0; t < 40; ++t) c.sizes.push_back(3 + t % 5);
  c.arena = true;
  c.options.fusion_threshold_bytes = 100;
  c.options.reverse_bucket_order = false;
  c.options.segment_bytes = 0;
  expect_matches_reference(train_distributed(c), train_reference(c.sizes, c.ranks, c.steps, 0.05f), 1e-5f);
}

TEST(DistributedOptimizer, Fp16CompressionStaysWithinHalfPrecision) {
  // One step of plain averaging: the fp16 wire result vs the exact average.
  FakeWorld world(3);
  const std::size_t n = 5000;
  std::vector<std::vector<float>> results(3);
  auto local = [](int rank, std::size_t i) { return std::sin(0.01f * static_cast<float>(i) + rank) * (1.0f + i % 3); };
  expect_no_errors(run_ranks(world, [&](int rank, std::unique_ptr<Collectives> coll) {
    std::vector<float> w(n, 0.0f), g(n);
    for (std::size_t i = 0; i < n; ++i) g[i] = local(rank, i);
    DistributedOptions o;
    o.compression = Compression::kFp16;
    o.fusion_threshold_bytes = 4096;
    o.segment_bytes = 1000;
    DistributedOptimizer opt(std::move(coll), optim::make_sgd({}), o);
    opt.add_parameter("w", w.data(), g.data(), n);
    opt.synchronize();
    results[static_cast<std::size_t>(rank)] = g;
  }));
  double worst = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const double exact = (local(0, i) + local(1, i) + local(2, i)) / 3.0;
    const double scale = (std::abs(local(0, i)) + std::abs(local(1, i)) + std::abs(local(2, i))) / 3.0;
    worst = std::max(worst, std::abs(results[0][i] - exact) / std::max(scale, 1e-3));
    ASSERT_EQ(results[1][i], results[0][i]);
  }
  EXPECT_LT(worst, 2e-3) << "fp16 relative error";
  EXPECT_GT(worst, 1e-6) << "the wire was not float16";
}

TEST(DistributedOptimizer, BroadcastsMakeRanksIdentical) {
  FakeWorld world(3);
  const std::vector<std::size_t> sizes = {4, 6, 3};
  std::vector<std::vector<float>> params(3), m_state(3);
  std::vector<int64_t> iterations(3);
  expect_no_errors(run_ranks(world, [&](int rank, std::unique_ptr<Collectives> coll) {
    LinearModel model(sizes, false);
    for (std::size_t t = 0; t < model.tensors(); ++t)
      for (std::size_t i = 0; i < model.size(t); ++i) model.value(t)[i] += static_cast<float>(rank);  // ranks differ
    auto adam = optim::make_adam({});
    if (rank == 1) {  // only rank 1 has trained: its state and count must win
      std::vector<optim::ParamRef> refs;
      model.backward(testing::make_batch(model.dim(), 4, 99));
      for (std::size_t t = 0; t < model.tensors(); ++t) refs.push_back({model.value(t), model.grad(t), model.size(t)});
      adam->step(refs);
      adam->step(refs);
    }
    DistributedOptimizer opt(std::move(coll), std::move(adam));
    for (std::size_t t = 0; t < model.tensors(); ++t)
      opt.add_parameter("w" + std::to_string(t), model.value(t), model.grad(t), model.size(t));
    opt.broadcast_parameters(1);
    opt.broadcast_optimizer_state(1);
    params[static_cast<std::size_t>(rank)] = model.flat_values();
    const auto state = opt.optimizer().state();
    ASSERT_EQ(state.size(), 6u);  // m and v per tensor
    for (const auto& s : state) m_state[static_cast<std::size_t>(rank)].insert(m_state[static_cast<std::size_t>(rank)].end(), s.data, s.data + s.size);
    iterations[static_cast<std::size_t>(rank)] = opt.optimizer().iterations();
  }));
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(params[static_cast<std::size_t>(r)], params[1]);
    EXPECT_EQ(m_state[static_cast<std::size_t>(r)], m_state[1]);
    EXPECT_EQ(iterations[static_cast<std::size_t>(r)], 2);
  }
  EXPECT_NE(std::count(m_state[0].begin(), m_state[0].end(), 0.0f), static_cast<long>(m_state[0].size()));
}

TEST(DistributedOptimizer, MetricAverage) {
  FakeWorld world(4);
  std::vector<double> got(4);
  std::vector<float> got_f(4);
  expect_no_errors(run_ranks(world, [&](int rank, std::unique_ptr<Collectives> coll) {
    DistributedOptimizer opt(std::move(coll), optim::make_sgd({}));
    got[static_cast<std::size_t>(rank)] = opt.metric_average(static_cast<double>(rank));
    got_f[static_cast<std::size_t>(rank)] = opt.metric_average(2.0f * rank);
  }));
  for (int r = 0; r < 4; ++r) {
    EXPECT_DOUBLE_EQ(got[static_cast<std::size_t>(r)], 1.5);
    EXPECT_FLOAT_EQ(got_f[static_cast<std::size_t>(r)], 3.0f);
  }
}

// Registration differs on rank 1: every rank throws MismatchError naming it.
void expect_mismatch(const std::vector<std::size_t>& rank0, const std::vector<std::size_t>& rank1,
                     const std::string& expected_text) {
  FakeWorld world(3, std::chrono::seconds(5));
  std::vector<std::string> messages(3);
  const auto errors = run_ranks(world, [&](int rank, std::unique_ptr<Collectives> coll) {
    const auto& sizes = rank == 1 ? rank1 : rank0;
    LinearModel model(sizes, false);
    DistributedOptimizer opt(std::move(coll), optim::make_sgd({}));
    for (std::size_t t = 0; t < model.tensors(); ++t)
      opt.add_parameter("w" + std::to_string(t), model.value(t), model.grad(t), model.size(t));
    try {
      opt.step();
    } catch (const MismatchError& e) {
      messages[static_cast<std::size_t>(rank)] = e.what();
      // Sticky: the next step fails the same way instead of reducing garbage.
      EXPECT_THROW(opt.step(), MismatchError);
      return;
    }
    ADD_FAILURE() << "rank " << rank << ": no MismatchError";
  });
  expect_no_errors(errors);
  for (int r = 0; r < 3; ++r) {
    const auto& m = messages[static_cast<std::size_t>(r)];
    EXPECT_NE(m.find("rank 1"), std::string::npos) << m;
    EXPECT_NE(m.find(expected_text), std::string::npos) << m;
    EXPECT_EQ(m, messages[0]) << "every rank reports the same mismatch";
  }
}

TEST(DistributedOptimizer, DifferentSizeIsAMismatchOnEveryRank) {
  expect_mismatch({4, 5, 6}, {4, 7, 6}, "tensor 1 has 7 elements on rank 1 but 5 on rank 0");
}

TEST(DistributedOptimizer, DifferentCountIsAMismatchOnEveryRank) {
  expect_mismatch({4, 5, 6}, {4, 5, 6, 2}, "4 tensors on rank 1 vs 3 on rank 0");
}

TEST(DistributedOptimizer, CommErrorReachesSynchronizeWithTheRank) {
  FakeWorld world(2, std::chrono::seconds(3));
  world.fail_rank(1, 3);  // registration check (3 collectives) passes, then rank 1's link breaks
  std::vector<std::string> messages(2);
  const auto errors = run_ranks(world, [&](int rank, std::unique_ptr<Collectives> coll) {
    std::vector<float> w(100, 1.0f), g(100, 1.0f);
    DistributedOptimizer opt(std::move(coll), optim::make_sgd({}));
    opt.add_parameter("w", w.data(), g.data(), w.size());
    try {
      opt.step();
    } catch (const CommError& e) {
      messages[static_cast<std::size_t>(rank)] = e.what();
      EXPECT_GE(e.rank(), 0);
      EXPECT_THROW(opt.step(), CommError);  // sticky
      EXPECT_THROW(opt.metric_average(1.0), CommError);
    }
  });
  expect_no_errors(errors);
  EXPECT_NE(messages[1].find("link to rank 0 broke"), std::string::npos) << messages[1];
  EXPECT_NE(messages[1].find("step 0, fusion bucket 0"), std::string::npos) << messages[1];
  EXPECT_FALSE(messages[0].empty()) << "rank 0 must fail too, not hang";
}

TEST(DistributedOptimizer, StalledPeerIsATimeoutNamingIt) {
  FakeWorld world(2, std::chrono::milliseconds(1500));  // generous: a loaded machine
  std::atomic<bool> rank0_done{false};
  int blamed = -2;
  const auto start = std::chrono::steady_clock::now();
  const auto errors = run_ranks(world, [&](int rank, std::unique_ptr<Collectives> coll) {
    std::vector<float> w(10, 1.0f), g(10, 1.0f);
    DistributedOptimizer opt(std::move(coll), optim::make_sgd({}));
    opt.add_parameter("w", w.data(), g.data(), w.size());
    if (rank == 1) {
      opt.step();  // rank 1 steps once and then stops training
      while (!rank0_done) std::this_thread::sleep_for(std::chrono::milliseconds(5));
      return;
    }
    opt.step();
    try {
      opt.step();
      ADD_FAILURE() << "second step should time out";
    } catch (const TimeoutError& e) {
      blamed = e.rank();
    }
    rank0_done = true;
  });
  expect_no_errors(errors);
  EXPECT_EQ(blamed, 1);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(15));
}

TEST(DistributedOptimizer, DestructorDoesNotWaitForGradientsNeverMarked) {
  FakeWorld world(1);
  std::vector<float> w(8), g(8);
  auto coll = world.rank(0);
  auto opt = std::make_unique<DistributedOptimizer>(std::move(coll), optim::make_sgd({}));
  opt->add_parameter("a", w.data(), g.data(), 4);
  opt->add_parameter("b", w.data() + 4, g.data() + 4, 4);
  opt->grad_ready(0);  // a step is in flight, waiting for "b"
  const auto start = std::chrono::steady_clock::now();
  opt.reset();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(2));
}

TEST(DistributedOptimizer, OwnedGradientsAreContiguousAndAveraged) {
  FakeWorld world(2);
  std::vector<std::vector<float>> got(2);
  expect_no_errors(run_ranks(world, [&](int rank, std::unique_ptr<Collectives> coll) {
    std::vector<float> w(10), user_grad(3, 5.0f);
    DistributedOptimizer opt(std::move(coll), optim::make_sgd({}));
    opt.add_parameter("a", w.data(), nullptr, 4);
    opt.add_parameter("b", w.data() + 4, user_grad.data(), 3);
    opt.add_parameter("c", w.data() + 7, nullptr, 3);
    EXPECT_EQ(opt.gradient(1), user_grad.data());
    EXPECT_EQ(opt.gradient(2), opt.gradient(0) + 4) << "owned gradients share one array";
    for (int i : {0, 2})
      for (int k = 0; k < (i == 0 ? 4 : 3); ++k) opt.gradient(i)[k] = static_cast<float>(rank * 10 + k);
    opt.synchronize();
    for (int i : {0, 1, 2}) got[static_cast<std::size_t>(rank)].insert(got[static_cast<std::size_t>(rank)].end(), opt.gradient(i), opt.gradient(i) + (i == 0 ? 4 : 3));
  }));
  EXPECT_EQ(got[0], (std::vector<float>{5, 6, 7, 8, 5, 5, 5, 5, 6, 7}));
  EXPECT_EQ(got[1], got[0]);
}

// Two optimizers on one communicator (a GAN's generator and discriminator):
// their collectives must reach the wire in program order on every rank.
TEST(DistributedOptimizer, TwoOptimizersOnOneCommunicatorStayInStep) {
  FakeWorld world(3);
  std::vector<std::vector<float>> got(3);
  expect_no_errors(run_ranks(world, [&](int rank, std::unique_ptr<Collectives> coll) {
    std::vector<float> wa(50), ga(50), wb(70), gb(70);
    DistributedOptions o;
    o.fusion_threshold_bytes = 64;
    DistributedOptimizer a(std::move(coll), optim::make_sgd({}), o);
    DistributedOptimizer b(world.rank(rank), optim::make_sgd({}), o);
    for (int t = 0; t < 5; ++t) a.add_parameter("a" + std::to_string(t), wa.data() + 10 * t, ga.data() + 10 * t, 10);
    for (int t = 0; t < 7; ++t) b.add_parameter("b" + std::to_string(t), wb.data() + 10 * t, nullptr, 10);
    a.gradient(0);  // both registration checks queued back to back
    b.gradient(0);
    for (int step = 0; step < 3; ++step) {
      std::fill(ga.begin(), ga.end(), static_cast<float>(rank));
      for (int t = 0; t < 7; ++t) std::fill(b.gradient(t), b.gradient(t) + 10, static_cast<float>(2 * rank));
      a.step();
      a.grad_ready(0);  // a's next step is in flight now
      EXPECT_THROW(a.grad_ready(0), InvalidArgument) << "a: marked twice";
      EXPECT_THROW(b.grad_ready(0), InvalidArgument) << "a has a step in flight";
      a.synchronize();
      b.grad_ready(6);
      EXPECT_THROW(a.grad_ready(0), InvalidArgument) << "b has a step in flight";
      EXPECT_THROW(a.metric_average(1.0), InvalidArgument) << "b has a step in flight";
      b.step();
      EXPECT_DOUBLE_EQ(a.metric_average(static_cast<double>(rank)), 1.0);
    }
    got[static_cast<std::size_t>(rank)] = {ga[0], ga[49], b.gradient(0)[0], b.gradient(6)[9]};
  }));
  for (int r = 0; r < 3; ++r) EXPECT_EQ(got[static_cast<std::size_t>(r)], (std::vector<float>{1, 1, 2, 2}));
}

TEST(DistributedOptimizer, MisuseIsReported) {
  FakeWorld world(1);
  std::vector<float> w(4), g(4);
  DistributedOptimizer opt(world.rank(0), optim::make_sgd({}));
  EXPECT_THROW(opt.add_parameter("null", nullptr, g.data(), 4), InvalidArgument);
  opt.add_parameter("w", w.data(), g.data(), 4);
  EXPECT_THROW(opt.grad_ready(1), InvalidArgument);
  opt.grad_ready(0);
  EXPECT_THROW(opt.grad_ready(0), InvalidArgument);
  opt.step();
  EXPECT_THROW(opt.add_parameter("late", w.data(), g.data(), 4), InvalidArgument);
  EXPECT_THROW(opt.broadcast_parameters(1), InvalidArgument);
}

TEST(DistributedOptimizer, ThresholdFromEnvironment) {
  FakeWorld world(1);
  ::setenv("MUSTER_FUSION_THRESHOLD_MB", "0.5", 1);
  DistributedOptimizer a(world.rank(0), optim::make_sgd({}));
  EXPECT_EQ(a.options().fusion_threshold_bytes, 512u * 1024);
  DistributedOptions explicit_options;
  explicit_options.fusion_threshold_bytes = 1000;
  DistributedOptimizer b(world.rank(0), optim::make_sgd({}), explicit_options);
  EXPECT_EQ(b.options().fusion_threshold_bytes, 1000u);
  ::setenv("MUSTER_FUSION_THRESHOLD_MB", "lots", 1);
  EXPECT_THROW(DistributedOptimizer(world.rank(0), optim::make_sgd({})), InvalidArgument);
  ::unsetenv("MUSTER_FUSION_THRESHOLD_MB");
  DistributedOptimizer c(world.rank(0), optim::make_sgd({}));
  EXPECT_EQ(c.options().fusion_threshold_bytes, kDefaultFusionThresholdBytes);
}

// Which caller-owned gradients are reduced in place by default: from 64 KB
// where the world shares one host and its private allreduces take the small
// path's rounds (2 ranks; more ranks than CPUs), from 1 MB elsewhere.
TEST(DistributedOptimizer, InPlaceThresholdFollowsTheWorld) {
  EXPECT_EQ(DistributedOptions{}.in_place_min_bytes, kAutoInPlaceMinBytes);
  EXPECT_EQ(auto_in_place_min_bytes(2, true, 16), 64u * 1024);
  EXPECT_EQ(auto_in_place_min_bytes(4, true, 2), 64u * 1024);
  EXPECT_EQ(auto_in_place_min_bytes(4, true, 16), 1u << 20);   // the ring, a CPU each
  EXPECT_EQ(auto_in_place_min_bytes(2, false, 16), 1u << 20);  // two hosts
  EXPECT_EQ(auto_in_place_min_bytes(8, false, 2), 1u << 20);
  EXPECT_EQ(auto_in_place_min_bytes(3, true, 0), 1u << 20);    // CPUs unknown
}

// What horovodrun --fusion-threshold-mb / --timeline-filename (and musterd's
// mpi clusters) export; muster's own variables win when both are set.
TEST(DistributedOptimizer, HonoursHorovodEnvironment) {
  FakeWorld world(1);
  ::setenv("HOROVOD_FUSION_THRESHOLD", "33554432", 1);
  ::setenv("HOROVOD_TIMELINE", "/tmp/hvd-timeline.json", 1);
  DistributedOptimizer a(world.rank(0), optim::make_sgd({}));
  EXPECT_EQ(a.options().fusion_threshold_bytes, 32u << 20);
  EXPECT_EQ(a.options().timeline_path, "/tmp/hvd-timeline.json");
  ::setenv("HOROVOD_FUSION_THRESHOLD", "0", 1);  // Horovod: fusion off
  EXPECT_EQ(DistributedOptimizer(world.rank(0), optim::make_sgd({})).options().fusion_threshold_bytes, 1u);
  ::setenv("MUSTER_FUSION_THRESHOLD_MB", "2", 1);
  EXPECT_EQ(DistributedOptimizer(world.rank(0), optim::make_sgd({})).options().fusion_threshold_bytes, 2u << 20);
  ::unsetenv("MUSTER_FUSION_THRESHOLD_MB");
  ::setenv("HOROVOD_FUSION_THRESHOLD", "-5", 1);
  EXPECT_THROW(DistributedOptimizer(world.rank(0), optim::make_sgd({})), InvalidArgument);
  ::unsetenv("HOROVOD_FUSION_THRESHOLD");
  ::unsetenv("HOROVOD_TIMELINE");
  std::filesystem::remove("/tmp/hvd-timeline.json");
}

TEST(DistributedOptimizer, TimelineRecordsEveryBucketPhase) {
  muster::testing::TempDir tmp("muster-dopt");
  const std::filesystem::path dir = tmp.path();
  const std::string path = (dir / "timeline.json").string();
  FakeWorld world(2);
  expect_no_errors(run_ranks(world, [&](int rank, std::unique_ptr<Collectives> coll) {
    std::vector<float> w(30, 1.0f), g(30, 1.0f);
    DistributedOptions o;
    o.fusion_threshold_bytes = 40;  // 10 floats: 3 buckets
    o.timeline_path = path;         // only rank 0 writes it
    DistributedOptimizer opt(std::move(coll), optim::make_sgd({}), o);
    for (int t = 0; t < 3; ++t) opt.add_parameter("w" + std::to_string(t), w.data() + 10 * t, g.data() + 10 * t, 10);
    (void)rank;
    opt.step();
    opt.step();
  }));
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  const auto j = nlohmann::json::parse(ss.str());
  std::map<std::string, int> phases;
  int steps = 0;
  for (const auto& e : j["traceEvents"]) {
    if (e["ph"] == "X" && e["cat"] == "bucket") {
      ++phases[e["name"].get<std::string>()];
      EXPECT_GE(e["tid"].get<int>(), 1);
      EXPECT_LE(e["tid"].get<int>(), 3);
      EXPECT_GE(e["dur"].get<int64_t>(), 0);
    }
    if (e["ph"] == "X" && e["cat"] == "step") ++steps;
  }
  for (const char* p : {"queued", "pack", "allreduce", "unpack"}) EXPECT_EQ(phases[p], 6) << p;  // 3 buckets x 2 steps
  EXPECT_EQ(steps, 2);
}

}  // namespace
}  // namespace muster::runtime::distributed
