// DistributedOptimizer over real MPI ranks (run by ctest under
// `mpirun -np 2` and `-np 3`): every rank trains the linear-regression model
// of distributed_test_model.h on its own batch and must end with parameters
// identical across ranks and equal to one process trained on the
// concatenated batch, which every rank also computes locally.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cmath>
#include <memory>
#include <random>

#include "distributed_test_model.h"
#include "runtime/comm/communicator.h"
#include "runtime/distributed/distributed_optimizer.h"
#include "runtime/error.h"

namespace muster::runtime::distributed {
namespace {

comm::Communicator* g_comm = nullptr;

using testing::LinearModel;

constexpr std::size_t kRows = 8;

// Every rank's final parameters, gathered, must all equal rank 0's.
void expect_identical_across_ranks(const std::vector<float>& mine) {
  std::vector<float> all(mine.size() * static_cast<std::size_t>(g_comm->size()));
  g_comm->allgather(mine.data(), mine.size(), DataType::kFloat32, all.data());
  for (int r = 1; r < g_comm->size(); ++r) {
    EXPECT_TRUE(std::equal(mine.begin(), mine.end(), all.begin() + static_cast<std::ptrdiff_t>(r * mine.size())))
        << "rank " << r << " holds different parameters than rank 0";
  }
}

// `owned`: the optimizer owns the gradients (in the communicator's shared
// memory, so its buckets run the direct allreduce) and the model's are
// copied in after each backward pass.
void train_and_compare(const std::vector<std::size_t>& sizes, bool arena, const DistributedOptions& options,
                       int steps, std::size_t min_buckets, bool owned = false) {
  const int rank = g_comm->rank(), n = g_comm->size();
  LinearModel model(sizes, arena);
  DistributedOptimizer opt(*g_comm, testing::test_momentum(0.05f), options);
  for (std::size_t t = 0; t < model.tensors(); ++t)
    opt.add_parameter("w" + std::to_string(t), model.value(t), owned ? nullptr : model.grad(t), model.size(t));
  opt.broadcast_parameters(0);
  opt.broadcast_optimizer_state(0);
  std::mt19937 rng(static_cast<unsigned>(rank) * 13 + 1);
  double loss = 0;
  for (int s = 0; s < steps; ++s) {
    loss = model.backward(testing::rank_batch(model.dim(), kRows, rank, s));
    if (owned) {
      for (std::size_t t = 0; t < model.tensors(); ++t) {
        std::copy(model.grad(t), model.grad(t) + model.size(t), opt.gradient(static_cast<int>(t)));
      }
    }
    // Backprop order, with a rank-dependent shuffle: the fixed bucket order
    // must make that irrelevant.
    std::vector<int> order(model.tensors());
    for (std::size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int>(order.size() - 1 - i);
    std::shuffle(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(order.size() / 2), rng);
    for (int i : order) opt.grad_ready(i);
    opt.step();
  }
  EXPECT_GE(opt.bucket_count(), min_buckets);
  // Every rank of these suites is on this host: owned gradients must be in
  // memory the peers map, or the direct allreduce was never exercised.
  if (owned) {
    EXPECT_TRUE(opt.gradients_direct()) << "owned gradients are not in shared memory";
  }
  const double avg = opt.metric_average(loss);
  EXPECT_TRUE(std::isfinite(avg));
  const auto mine = model.flat_values();
  expect_identical_across_ranks(mine);
  const auto ref = testing::train_reference(sizes, n, steps, kRows, 0.05f);
  // float32 summed in another order: a few ulps, relative for the large weights.
  for (std::size_t i = 0; i < ref.size(); ++i) {
    ASSERT_NEAR(mine[i], ref[i], 2e-5f * std::max(1.0f, std::abs(ref[i]))) << "w[" << i << "]";
  }
}

TEST(DistributedMpi, MatchesOneProcessOnTheConcatenatedBatch) {
  DistributedOptions o;
  o.fusion_threshold_bytes = 64;  // 16 floats: several buckets
  train_and_compare({5, 12, 1, 9, 30, 2, 7}, false, o, 6, 3);
}

TEST(DistributedMpi, DefaultFusionInPlace) {
  train_and_compare({50, 120, 10, 90, 300}, true, DistributedOptions{}, 4, 1);
}

TEST(DistributedMpi, OwnedGradientsInSharedMemory) {
  DistributedOptions o;
  o.fusion_threshold_bytes = 400;  // several buckets at different offsets of one shared buffer
  train_and_compare({50, 120, 10, 90, 300, 7}, false, o, 4, 3, /*owned=*/true);
}

TEST(DistributedMpi, DefaultSegmentsCutLargeTensors) {
  // 2 MB of gradients, all fused: the default 1 MB segments split the large tensors.
  DistributedOptions o;
  o.in_place_min_bytes = 0;
  train_and_compare({300000, 200001, 5}, false, o, 2, 1);
}

TEST(DistributedMpi, LargeUserGradientsReducedInPlace) {
  // The 1.2 MB and 1.6 MB tensors (caller's buffers) go alone and in place;
  // the small ones around them share one packed bucket: 3 buckets.
  train_and_compare({3, 300000, 5, 7, 400000, 2}, false, DistributedOptions{}, 3, 3);
}

TEST(DistributedMpi, TwoHundredSmallTensorsInSeveralBuckets) {
  std::vector<std::size_t> sizes;
  for (std::size_t t = 0; t < 200; ++t) sizes.push_back(1 + (t * 5) % 11);
  DistributedOptions o;
  o.fusion_threshold_bytes = 512;
  o.segment_bytes = 48;
  train_and_compare(sizes, false, o, 3, 5);
}

TEST(DistributedMpi, RingAlgorithmForLargeBuckets) {
  DistributedOptions o;
  o.algorithm = comm::Algorithm::kRing;
  o.fusion_threshold_bytes = 4000;
  train_and_compare({700, 1300, 20, 2000}, false, o, 3, 2);
}

TEST(DistributedMpi, Fp16CompressionWithinHalfPrecision) {
  const int rank = g_comm->rank(), n = g_comm->size();
  const std::size_t count = 100000;
  auto local = [](int r, std::size_t i) {
    return std::sin(0.001f * static_cast<float>(i) + static_cast<float>(r)) * (1.0f + static_cast<float>(i % 4));
  };
  std::vector<float> w(count, 0.0f), g(count);
  for (std::size_t i = 0; i < count; ++i) g[i] = local(rank, i);
  DistributedOptions o;
  o.compression = Compression::kFp16;
  o.fusion_threshold_bytes = 64 * 1024;
  DistributedOptimizer opt(*g_comm, optim::make_sgd({}), o);
  opt.add_parameter("a", w.data(), g.data(), count / 2);
  opt.add_parameter("b", w.data() + count / 2, g.data() + count / 2, count - count / 2);
  opt.synchronize();
  double worst = 0;
  for (std::size_t i = 0; i < count; ++i) {
    double exact = 0, scale = 0;
    for (int r = 0; r < n; ++r) {
      exact += local(r, i);
      scale += std::abs(local(r, i));
    }
    worst = std::max(worst, std::abs(g[i] - exact / n) / std::max(scale / n, 1e-3));
  }
  EXPECT_LT(worst, 2e-3) << "relative error of the fp16 wire";
  EXPECT_GT(worst, 1e-6) << "no rounding at all: was the wire really float16?";
  expect_identical_across_ranks(g);
}

TEST(DistributedMpi, BroadcastsMakeRanksIdentical) {
  const int rank = g_comm->rank();
  const std::vector<std::size_t> sizes = {40, 3, 17};
  LinearModel model(sizes, false);
  for (std::size_t t = 0; t < model.tensors(); ++t)
    for (std::size_t i = 0; i < model.size(t); ++i) model.value(t)[i] += 0.5f * static_cast<float>(rank);
  auto adam = optim::make_adam({});
  if (rank == 0) {
    model.backward(testing::rank_batch(model.dim(), 4, 7, 7));
    std::vector<optim::ParamRef> refs;
    for (std::size_t t = 0; t < model.tensors(); ++t) refs.push_back({model.value(t), model.grad(t), model.size(t)});
    for (int i = 0; i < 3; ++i) adam->step(refs);
  }
  DistributedOptimizer opt(*g_comm, std::move(adam));
  for (std::size_t t = 0; t < model.tensors(); ++t)
    opt.add_parameter("w" + std::to_string(t), model.value(t), model.grad(t), model.size(t));
  opt.broadcast_parameters(0);
  opt.broadcast_optimizer_state(0);
  EXPECT_EQ(opt.optimizer().iterations(), 3);
  expect_identical_across_ranks(model.flat_values());
  std::vector<float> state;
  for (const auto& s : opt.optimizer().state()) state.insert(state.end(), s.data, s.data + s.size);
  ASSERT_EQ(state.size(), 2u * model.dim());
  expect_identical_across_ranks(state);
  // And they stay identical through training.
  for (int s = 0; s < 3; ++s) {
    model.backward(testing::rank_batch(model.dim(), kRows, rank, s));
    opt.step();
  }
  expect_identical_across_ranks(model.flat_values());
}

void expect_mismatch(const std::vector<std::size_t>& others, const std::vector<std::size_t>& rank1,
                     const std::string& expected) {
  const int rank = g_comm->rank();
  const auto& sizes = rank == 1 ? rank1 : others;
  LinearModel model(sizes, false);
  DistributedOptimizer opt(*g_comm, optim::make_sgd({}));
  for (std::size_t t = 0; t < model.tensors(); ++t)
    opt.add_parameter("w" + std::to_string(t), model.value(t), model.grad(t), model.size(t));
  try {
    opt.step();
    ADD_FAILURE() << "rank " << rank << ": mismatched registration was not reported";
  } catch (const MismatchError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find(expected), std::string::npos) << m;
  }
  // The communicator is still healthy afterwards: the check only ran clean collectives.
  g_comm->barrier();
}

TEST(DistributedMpi, DifferentSizeOnRank1IsAMismatchEverywhere) {
  expect_mismatch({10, 20, 30}, {10, 21, 30}, "tensor 1 has 21 elements on rank 1 but 20 on rank 0");
}

TEST(DistributedMpi, DifferentCountOnRank1IsAMismatchEverywhere) {
  expect_mismatch({10, 20, 30}, {10, 20}, "2 tensors on rank 1 vs 3 on rank 0");
}

}  // namespace
}  // namespace muster::runtime::distributed

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  muster::runtime::comm::CommOptions options;
  options.timeout = std::chrono::seconds(20);  // a failing rank must not stall ctest for long
  auto comm = muster::runtime::comm::Communicator::create(options);
  if (comm->size() < 2) {
    std::fprintf(stderr, "distributed_mpi_test: run under mpirun -np 2 or more\n");
    return 1;
  }
  muster::runtime::distributed::g_comm = comm.get();
  const int result = RUN_ALL_TESTS();
  // Exit non-zero on every rank if any rank failed.
  int failed = result != 0 ? 1 : 0;
  comm->allreduce(&failed, 1, muster::runtime::DataType::kInt32, {muster::runtime::comm::ReduceOp::kMax});
  comm.reset();
  return failed;
}
