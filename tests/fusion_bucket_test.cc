// Bucket planning and packing (runtime/distributed/fusion_bucket.h).
#include "runtime/distributed/fusion_bucket.h"

#include <gtest/gtest.h>

#include <cmath>
#include <numeric>

#include "runtime/error.h"

namespace muster::runtime::distributed {
namespace {

std::vector<std::size_t> firsts(const std::vector<BucketPlan>& plans) {
  std::vector<std::size_t> out;
  for (const auto& p : plans) out.push_back(p.first());
  return out;
}

TEST(PlanBuckets, FillsUpToThresholdInRegistrationOrder) {
  // 100 bytes threshold = 25 floats: {10,10,5} {1,20,4} {30} {2}.
  const auto plans = plan_buckets({10, 10, 5, 1, 20, 4, 30, 2}, 100);
  EXPECT_EQ(firsts(plans), (std::vector<std::size_t>{0, 3, 6, 7}));
  ASSERT_EQ(plans.size(), 4u);
  EXPECT_EQ(plans[0].count(), 3u);
  EXPECT_EQ(plans[0].elements, 25u);
  EXPECT_EQ(plans[1].elements, 25u);
  EXPECT_EQ(plans[2].elements, 30u);  // larger than the threshold: alone
  EXPECT_EQ(plans[3].count(), 1u);
}

TEST(PlanBuckets, NeverExceedsThresholdUnlessOneTensorDoes) {
  const std::vector<std::size_t> sizes = {3, 7, 1, 64, 2, 2, 2, 9, 0, 5, 100, 1};
  for (std::size_t threshold : {1u, 4u, 16u, 40u, 100u, 1000u}) {
    const auto plans = plan_buckets(sizes, threshold);
    std::size_t next = 0, total = 0;
    for (const auto& p : plans) {
      ASSERT_GT(p.count(), 0u);
      EXPECT_EQ(p.first(), next) << "buckets must be consecutive runs";
      EXPECT_EQ(p.tensors.back() + 1 - p.first(), p.count()) << "buckets must be consecutive runs";
      std::size_t e = 0;
      for (const std::size_t i : p.tensors) e += sizes[i];
      EXPECT_EQ(e, p.elements);
      if (p.count() > 1) {
        EXPECT_LE(e * 4, threshold) << "threshold " << threshold;
      }
      next = p.first() + p.count();
      total += e;
    }
    EXPECT_EQ(next, sizes.size());
    EXPECT_EQ(total, std::accumulate(sizes.begin(), sizes.end(), std::size_t{0}));
  }
}

TEST(PlanBuckets, EdgeCases) {
  EXPECT_TRUE(plan_buckets({}, 64).empty());
  EXPECT_EQ(plan_buckets({5, 5, 5}, 1).size(), 3u);          // one tensor per bucket
  EXPECT_EQ(plan_buckets({5, 5, 5}, 1 << 20).size(), 1u);    // all fused
  EXPECT_THROW(plan_buckets({1}, 0), InvalidArgument);
  EXPECT_THROW(plan_buckets({1, 2}, 64, {true}), InvalidArgument);  // one flag per tensor
}

// A tensor flagged "alone" gets a bucket of its own; the run of the others
// goes on past it, and the plans stay ordered by their first tensor.
TEST(PlanBuckets, AloneTensorsGetTheirOwnBucketAndTheRunGoesOn) {
  const auto plans = plan_buckets({3, 4, 100, 5, 6, 200, 7}, 1 << 20, {false, false, true, false, false, true, false});
  ASSERT_EQ(plans.size(), 3u);
  EXPECT_EQ(plans[0].tensors, (std::vector<std::size_t>{0, 1, 3, 4, 6}));
  EXPECT_EQ(plans[0].elements, 25u);
  EXPECT_EQ(plans[1].tensors, (std::vector<std::size_t>{2}));
  EXPECT_EQ(plans[1].elements, 100u);
  EXPECT_EQ(plans[2].tensors, (std::vector<std::size_t>{5}));
}

// The lone tensors a run passes over count towards its threshold, so it spans
// no more of the registration (no more of backprop) than a consecutive run.
TEST(PlanBuckets, LoneTensorsCountTowardsTheRunsSpan) {
  // 100 bytes = 25 floats. The run {0, 1, 3, 4} spans 4+4+10+4+2 = 24; past
  // the lone 30-float tensor 5, tensor 6 starts a run of its own.
  const std::vector<std::size_t> sizes = {4, 4, 10, 4, 2, 30, 3};
  const std::vector<bool> alone = {false, false, true, false, false, true, false};
  const auto plans = plan_buckets(sizes, 100, alone);
  std::vector<std::vector<std::size_t>> got;
  for (const auto& p : plans) got.push_back(p.tensors);
  EXPECT_EQ(got, (std::vector<std::vector<std::size_t>>{{0, 1, 3, 4}, {2}, {5}, {6}}));
  EXPECT_EQ(plans[0].elements, 14u);
  // Every tensor is in exactly one bucket, and a lone one is always alone.
  std::vector<int> seen(sizes.size(), 0);
  for (const auto& p : plans) {
    for (const std::size_t t : p.tensors) ++seen[t];
    if (p.count() == 1 && alone[p.first()]) continue;
    for (const std::size_t t : p.tensors) EXPECT_FALSE(alone[t]) << "tensor " << t;
  }
  EXPECT_EQ(seen, (std::vector<int>(sizes.size(), 1)));
  // Without the lone tensors (all flags false) the runs are consecutive again.
  EXPECT_EQ(plan_buckets(sizes, 100, std::vector<bool>(sizes.size(), false)).size(), plan_buckets(sizes, 100).size());
}

struct Tensors {
  std::vector<std::vector<float>> storage;
  std::vector<GradientRef> refs;
  explicit Tensors(const std::vector<std::size_t>& sizes) {
    for (std::size_t t = 0; t < sizes.size(); ++t) {
      storage.emplace_back(sizes[t] + 3);
      for (std::size_t i = 0; i < sizes[t]; ++i) storage[t][i] = static_cast<float>(t) + 0.001f * i;
    }
    for (std::size_t t = 0; t < sizes.size(); ++t) refs.push_back({"t" + std::to_string(t), storage[t].data(), sizes[t]});
  }
};

TEST(FusionBucket, PackUnpackRoundTripsFloat32) {
  Tensors ts({4, 0, 7, 1});
  const auto plans = plan_buckets({4, 0, 7, 1}, 1 << 20);
  ASSERT_EQ(plans.size(), 1u);
  FusionBucket b(plans[0], ts.refs, false);
  EXPECT_FALSE(b.in_place());
  EXPECT_EQ(b.wire_count(), 12u);
  EXPECT_EQ(b.wire_bytes(), 48u);
  b.pack();
  const float* wire = static_cast<const float*>(b.wire_data());
  EXPECT_FLOAT_EQ(wire[0], 0.0f);
  EXPECT_FLOAT_EQ(wire[4], 2.0f);     // tensor 1 is empty, tensor 2 follows tensor 0
  EXPECT_FLOAT_EQ(wire[11], 3.0f);
  // Pretend the allreduce doubled everything.
  for (std::size_t i = 0; i < b.wire_count(); ++i) static_cast<float*>(b.wire_data())[i] *= 2;
  b.unpack();
  EXPECT_FLOAT_EQ(ts.storage[2][6], 2 * (2.0f + 0.006f));
  EXPECT_FLOAT_EQ(ts.storage[0][3], 2 * 0.003f);
  EXPECT_FLOAT_EQ(ts.storage[0][4], 0.0f) << "unpack must not write past a tensor";
}

TEST(FusionBucket, SegmentsCutAcrossTensors) {
  const std::vector<std::size_t> sizes = {3, 0, 5, 2};
  Tensors ts(sizes);
  FusionBucket b(plan_buckets(sizes, 1 << 20)[0], ts.refs, false);
  ASSERT_EQ(b.wire_count(), 10u);
  // Pack in uneven segments, double on the wire, unpack in other segments.
  for (std::size_t begin : {0u, 4u, 7u}) b.pack(begin, std::min<std::size_t>(begin + (begin == 0 ? 4 : 3), 10));
  float* wire = static_cast<float*>(b.wire_data());
  EXPECT_FLOAT_EQ(wire[2], 0.002f);
  EXPECT_FLOAT_EQ(wire[3], 2.0f);      // tensor 2 starts after tensor 0
  EXPECT_FLOAT_EQ(wire[8], 3.0f);
  EXPECT_EQ(static_cast<float*>(b.wire_at(8)), wire + 8);
  for (std::size_t i = 0; i < 10; ++i) wire[i] *= 2;
  b.unpack(0, 2);
  b.unpack(2, 9);
  EXPECT_FLOAT_EQ(ts.storage[3][1], 3.001f) << "outside the unpacked range";
  b.unpack(9, 10);
  EXPECT_FLOAT_EQ(ts.storage[0][2], 0.004f);
  EXPECT_FLOAT_EQ(ts.storage[2][4], 2 * 2.004f);
  EXPECT_FLOAT_EQ(ts.storage[3][1], 2 * 3.001f);
  EXPECT_FLOAT_EQ(ts.storage[2][5], 0.0f) << "unpack must not write past a tensor";
}

// A bucket that skips a lone tensor packs and unpacks only its own tensors.
TEST(FusionBucket, PacksOnlyItsTensorsAroundALoneOne) {
  const std::vector<std::size_t> sizes = {2, 5, 3};
  Tensors ts(sizes);
  const auto plans = plan_buckets(sizes, 1 << 20, {false, true, false});
  ASSERT_EQ(plans.size(), 2u);
  FusionBucket b(plans[0], ts.refs, false);
  ASSERT_EQ(b.wire_count(), 5u);
  EXPECT_FALSE(b.in_place());
  b.pack();
  float* wire = static_cast<float*>(b.wire_data());
  EXPECT_FLOAT_EQ(wire[1], 0.001f);
  EXPECT_FLOAT_EQ(wire[2], 2.0f);  // tensor 2 follows tensor 0 on the wire
  for (std::size_t i = 0; i < 5; ++i) wire[i] = -1.0f;
  b.unpack();
  EXPECT_FLOAT_EQ(ts.storage[0][1], -1.0f);
  EXPECT_FLOAT_EQ(ts.storage[2][2], -1.0f);
  EXPECT_FLOAT_EQ(ts.storage[1][0], 1.0f) << "the lone tensor is not this bucket's";
  EXPECT_FLOAT_EQ(ts.storage[1][4], 1.004f);
  // Adjacent in memory though not in registration order: in place.
  std::vector<float> arena(5, 1.0f), lone(5, 1.0f);
  std::vector<GradientRef> refs = {{"a", arena.data(), 2}, {"big", lone.data(), 5}, {"b", arena.data() + 2, 3}};
  FusionBucket adjacent(plans[0], refs, false);
  EXPECT_TRUE(adjacent.in_place());
  EXPECT_EQ(adjacent.wire_data(), arena.data());
}

TEST(FusionBucket, AdjacentGradientsAreReducedInPlace) {
  std::vector<float> arena(20, 1.0f);
  std::vector<GradientRef> refs = {{"a", arena.data(), 5}, {"b", arena.data() + 5, 0}, {"c", arena.data() + 5, 15}};
  FusionBucket b(plan_buckets({5, 0, 15}, 1 << 20)[0], refs, false);
  EXPECT_TRUE(b.in_place());
  EXPECT_EQ(b.wire_data(), arena.data());
  EXPECT_EQ(b.wire_count(), 20u);
  // A gap breaks adjacency; fp16 always needs its own buffer.
  refs[2].data = arena.data() + 6;
  refs[2].size = 14;
  EXPECT_FALSE(FusionBucket(plan_buckets({5, 0, 14}, 1 << 20)[0], refs, false).in_place());
  refs[2] = {"c", arena.data() + 5, 15};
  EXPECT_FALSE(FusionBucket(plan_buckets({5, 0, 15}, 1 << 20)[0], refs, true).in_place());
}

TEST(FusionBucket, Fp16RoundTripWithinHalfPrecision) {
  Tensors ts({1000, 333});
  for (std::size_t i = 0; i < 1000; ++i) ts.storage[0][i] = std::sin(0.37f * i) * std::pow(10.0f, (i % 7) - 3.0f);
  const std::vector<float> before = ts.storage[0];
  FusionBucket b(plan_buckets({1000, 333}, 1 << 20)[0], ts.refs, true);
  EXPECT_EQ(b.wire_dtype(), DataType::kFloat16);
  EXPECT_EQ(b.wire_bytes(), 2u * 1333);
  b.pack();
  b.unpack();
  for (std::size_t i = 0; i < 1000; ++i) {
    // float16 keeps 11 significant bits: relative error <= 2^-11 for normals.
    const float tol = std::max(std::abs(before[i]) * 4.9e-4f, 6e-8f);
    EXPECT_NEAR(ts.storage[0][i], before[i], tol) << i;
  }
}

}  // namespace
}  // namespace muster::runtime::distributed
