// DistributedSampler: which examples each rank trains on, epoch by epoch.
//
// Every epoch the whole index [0, N) is shuffled with a seed derived from
// (seed, epoch) -- identical on every rank, different every epoch -- and then
// rank r takes positions r, r + size, r + 2*size, ... If N is not a multiple of
// size, the shuffled order wraps around (its first items are repeated) so that
// every rank gets exactly ceil(N / size) items and therefore the same number
// of batches: an allreduce never waits for a rank that ran out.
//
// Shuffling before sharding matters: sharding first would show each rank the
// same shard every epoch.
//
// Usage:
//   DistributedSampler s({.count = 60000, .rank = r, .size = n, .seed = 42});
//   for (epoch...) { auto idx = s.indices(epoch); ... batches of idx ... }
#pragma once

#include <cstdint>
#include <vector>

namespace muster::runtime::data {

struct SamplerOptions {
  int64_t count = 0;   // data set size N
  int rank = 0;
  int size = 1;
  uint64_t seed = 0;
  bool shuffle = true;  // false: the identity order (evaluation)
};

class DistributedSampler {
 public:
  explicit DistributedSampler(const SamplerOptions& options);  // throws InvalidArgument

  // Items per rank per epoch: ceil(N / size), the same on every rank.
  int64_t per_rank() const { return per_rank_; }

  // Batches per rank per epoch (the last one may be smaller, on every rank alike).
  int64_t batches(int64_t batch_size) const { return (per_rank_ + batch_size - 1) / batch_size; }

  // This rank's indices for `epoch`, per_rank() of them.
  std::vector<int64_t> indices(int64_t epoch) const;

  // The full shuffled order of `epoch` before sharding (N items), for tests.
  std::vector<int64_t> permutation(int64_t epoch) const;

 private:
  SamplerOptions options_;
  int64_t per_rank_;
};

}  // namespace muster::runtime::data
