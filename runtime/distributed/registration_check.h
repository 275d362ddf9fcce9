// Registration check: do all ranks agree on what they will allreduce?
//
// DistributedOptimizer never negotiates which tensors are reduced: every
// rank reduces the same fixed bucket plan. That is only safe when every rank
// registered the same gradients, so before the first bucket all ranks run
// check_registration(), a fixed sequence of collectives that cannot hang on
// a mismatch:
//   a) allgather a fixed-size summary per rank: tensor count, total
//      elements, a hash of the sizes, a hash of the names, the fusion
//      threshold, the compression, the bucket count and the segment size;
//   b) if any rank's summary differs from rank 0's (every rank sees the same
//      table, so every rank takes the same branch), allgatherv every rank's
//      sizes and name hashes, find the first differing rank and tensor, and
//      throw MismatchError with the same message on every rank;
//   c) otherwise allreduce min and max of each bucket's element count, an
//      exact per-bucket check that does not rely on the hashes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "runtime/distributed/collectives.h"
#include "runtime/distributed/fusion_bucket.h"

namespace muster::runtime::distributed {

struct RegistrationSummary {
  int64_t count = 0;
  int64_t total_elements = 0;
  int64_t sizes_hash = 0;
  int64_t names_hash = 0;
  int64_t threshold_bytes = 0;
  int64_t compression = 0;
  int64_t buckets = 0;
  int64_t segment_bytes = 0;
};

// What besides the gradients every rank must agree on.
struct ReductionSettings {
  std::size_t threshold_bytes = 0;
  int compression = 0;
  std::size_t segment_bytes = 0;
};

RegistrationSummary summarize(const std::vector<GradientRef>& grads, const ReductionSettings& settings,
                              std::size_t buckets);

// Explains how `other` (rank `other_rank`) differs from `mine` (rank
// `my_rank`), using the full size/name-hash lists when given; empty when equal.
std::string describe_mismatch(int base_rank, const RegistrationSummary& base, const std::vector<int64_t>& base_sizes,
                              const std::vector<int64_t>& base_names, int other_rank,
                              const RegistrationSummary& other, const std::vector<int64_t>& other_sizes,
                              const std::vector<int64_t>& other_names);

// Collective; throws MismatchError on every rank when registrations differ.
void check_registration(Collectives& coll, const std::vector<GradientRef>& grads, const ReductionSettings& settings,
                        const std::vector<BucketPlan>& plans);

}  // namespace muster::runtime::distributed
