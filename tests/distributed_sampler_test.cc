// DistributedSampler: within an epoch the ranks' shares are disjoint (up to
// the padding) and cover the data set; epochs are reshuffled; every rank gets
// the same count, so the same number of batches.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <tuple>
#include <vector>

#include "runtime/data/distributed_sampler.h"
#include "runtime/error.h"

namespace muster::runtime::data {
namespace {

class SamplerTest : public ::testing::TestWithParam<std::tuple<int64_t, int>> {};

TEST_P(SamplerTest, DisjointCoveringEqualAndReshuffled) {
  const auto [n, size] = GetParam();
  const int64_t per_rank = (n + size - 1) / size;
  const int64_t padding = per_rank * size - n;
  std::vector<std::vector<int64_t>> epoch0;
  for (int epoch = 0; epoch < 3; ++epoch) {
    std::vector<int64_t> all;
    for (int r = 0; r < size; ++r) {
      DistributedSampler s({n, r, size, 1234, true});
      EXPECT_EQ(s.per_rank(), per_rank);
      EXPECT_EQ(s.batches(7), (per_rank + 6) / 7);
      auto idx = s.indices(epoch);
      ASSERT_EQ(static_cast<int64_t>(idx.size()), per_rank) << "rank " << r;  // equal counts
      for (int64_t i : idx) ASSERT_TRUE(i >= 0 && i < n);
      all.insert(all.end(), idx.begin(), idx.end());
      if (epoch == 0) epoch0.push_back(idx);
      if (epoch == 1 && n >= 50) {
        EXPECT_NE(idx, epoch0[r]) << "rank " << r << " saw the same order twice";
      }
    }
    std::set<int64_t> distinct(all.begin(), all.end());
    EXPECT_EQ(static_cast<int64_t>(distinct.size()), n) << "every item covered";
    // Disjoint: the only repeats are the `padding` wrapped items.
    EXPECT_EQ(static_cast<int64_t>(all.size()) - n, padding);
  }
}

INSTANTIATE_TEST_SUITE_P(Sizes, SamplerTest,
                         ::testing::Combine(::testing::Values<int64_t>(1, 7, 100, 1001, 60000),
                                            ::testing::Values(1, 2, 3, 4)));

TEST(Sampler, SameSeedAndEpochGiveTheSameOrderDifferentSeedsDiffer) {
  DistributedSampler a({1000, 0, 2, 7, true}), b({1000, 0, 2, 7, true}), c({1000, 0, 2, 8, true});
  EXPECT_EQ(a.indices(5), b.indices(5));
  EXPECT_NE(a.indices(5), c.indices(5));
  auto p = a.permutation(5);
  std::vector<int64_t> sorted = p;
  std::sort(sorted.begin(), sorted.end());
  for (int64_t i = 0; i < 1000; ++i) ASSERT_EQ(sorted[i], i);
  EXPECT_NE(p, sorted);
}

TEST(Sampler, ShuffleOffIsTheIdentityStride) {
  DistributedSampler s({10, 1, 3, 0, false});
  EXPECT_EQ(s.indices(0), (std::vector<int64_t>{1, 4, 7, 0}));  // 10 wraps to 0
}

TEST(Sampler, RejectsBadOptions) {
  EXPECT_THROW(DistributedSampler({0, 0, 1, 0, true}), InvalidArgument);
  EXPECT_THROW(DistributedSampler({10, 2, 2, 0, true}), InvalidArgument);
  EXPECT_THROW(DistributedSampler({10, 0, 0, 0, true}), InvalidArgument);
}

}  // namespace
}  // namespace muster::runtime::data
