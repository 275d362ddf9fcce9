#include "runtime/data/distributed_sampler.h"

#include <numeric>
#include <string>

#include "runtime/error.h"

namespace muster::runtime::data {
namespace {

// SplitMix64: a well-mixed 64-bit stream from any seed, the same on every
// platform (std::shuffle and the std distributions are not specified exactly).
struct SplitMix64 {
  uint64_t state;
  uint64_t next() {
    uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
};

}  // namespace

DistributedSampler::DistributedSampler(const SamplerOptions& options) : options_(options) {
  if (options.count <= 0) throw InvalidArgument("sampler: data set is empty");
  if (options.size <= 0 || options.rank < 0 || options.rank >= options.size) {
    throw InvalidArgument("sampler: rank " + std::to_string(options.rank) + " not in [0, " +
                          std::to_string(options.size) + ")");
  }
  per_rank_ = (options.count + options.size - 1) / options.size;
}

std::vector<int64_t> DistributedSampler::permutation(int64_t epoch) const {
  std::vector<int64_t> p(static_cast<std::size_t>(options_.count));
  std::iota(p.begin(), p.end(), int64_t{0});
  if (!options_.shuffle) return p;
  // Seed from (seed, epoch): mix both so neighbouring epochs are unrelated.
  SplitMix64 rng{SplitMix64{options_.seed ^ 0x6A09E667F3BCC909ull}.next() ^
                 (static_cast<uint64_t>(epoch) * 0x9E3779B97F4A7C15ull)};
  // Fisher-Yates; the modulo bias is below 2^-40 for any realistic N.
  for (std::size_t i = p.size() - 1; i > 0; --i) {
    const std::size_t j = static_cast<std::size_t>(rng.next() % (i + 1));
    std::swap(p[i], p[j]);
  }
  return p;
}

std::vector<int64_t> DistributedSampler::indices(int64_t epoch) const {
  const std::vector<int64_t> p = permutation(epoch);
  std::vector<int64_t> mine;
  mine.reserve(static_cast<std::size_t>(per_rank_));
  const int64_t n = options_.count;
  for (int64_t k = 0; k < per_rank_; ++k) {
    const int64_t pos = options_.rank + k * options_.size;  // < per_rank * size
    mine.push_back(p[static_cast<std::size_t>(pos % n)]);   // wrap: pad with the first items
  }
  return mine;
}

}  // namespace muster::runtime::data
