#include "runtime/distributed/registration_check.h"

#include <algorithm>
#include <cstring>
#include <sstream>

#include "runtime/error.h"

namespace muster::runtime::distributed {
namespace {

constexpr std::size_t kSummaryWords = sizeof(RegistrationSummary) / sizeof(int64_t);

uint64_t fnv1a(uint64_t h, const void* data, std::size_t n) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (std::size_t i = 0; i < n; ++i) {
    h ^= p[i];
    h *= 1099511628211ull;
  }
  return h;
}

constexpr uint64_t kFnvBasis = 14695981039346656037ull;

int64_t name_hash(const std::string& name) {
  return static_cast<int64_t>(fnv1a(kFnvBasis, name.data(), name.size()));
}

bool same(const RegistrationSummary& a, const RegistrationSummary& b) {
  return std::memcmp(&a, &b, sizeof a) == 0;
}

}  // namespace

RegistrationSummary summarize(const std::vector<GradientRef>& grads, const ReductionSettings& settings,
                              std::size_t buckets) {
  RegistrationSummary s;
  s.count = static_cast<int64_t>(grads.size());
  uint64_t sizes = kFnvBasis, names = kFnvBasis;
  for (const auto& g : grads) {
    s.total_elements += static_cast<int64_t>(g.size);
    const uint64_t n = g.size;
    sizes = fnv1a(sizes, &n, sizeof n);
    const int64_t nh = name_hash(g.name);
    names = fnv1a(names, &nh, sizeof nh);
  }
  s.sizes_hash = static_cast<int64_t>(sizes);
  s.names_hash = static_cast<int64_t>(names);
  s.threshold_bytes = static_cast<int64_t>(settings.threshold_bytes);
  s.compression = settings.compression;
  s.buckets = static_cast<int64_t>(buckets);
  s.segment_bytes = static_cast<int64_t>(settings.segment_bytes);
  return s;
}

std::string describe_mismatch(int base_rank, const RegistrationSummary& base, const std::vector<int64_t>& base_sizes,
                              const std::vector<int64_t>& base_names, int other_rank,
                              const RegistrationSummary& other, const std::vector<int64_t>& other_sizes,
                              const std::vector<int64_t>& other_names) {
  if (same(base, other)) return "";
  std::ostringstream os;
  os << "DistributedOptimizer: rank " << other_rank << " registered different gradients than rank " << base_rank
     << ": ";
  const std::size_t common = std::min(base_sizes.size(), other_sizes.size());
  for (std::size_t i = 0; i < common; ++i) {
    if (base_sizes[i] != other_sizes[i]) {
      os << "tensor " << i << " has " << other_sizes[i] << " elements on rank " << other_rank << " but "
         << base_sizes[i] << " on rank " << base_rank;
      return os.str();
    }
  }
  if (base.count != other.count) {
    os << other.count << " tensors on rank " << other_rank << " vs " << base.count << " on rank " << base_rank;
    return os.str();
  }
  for (std::size_t i = 0; i < std::min(base_names.size(), other_names.size()); ++i) {
    if (base_names[i] != other_names[i]) {
      os << "tensor " << i << " has a different name (registration order differs?)";
      return os.str();
    }
  }
  if (base.threshold_bytes != other.threshold_bytes) {
    os << "fusion threshold " << other.threshold_bytes << " bytes on rank " << other_rank << " vs "
       << base.threshold_bytes << " on rank " << base_rank << " (set MUSTER_FUSION_THRESHOLD_MB the same everywhere)";
    return os.str();
  }
  if (base.compression != other.compression) {
    os << "compression differs (" << other.compression << " vs " << base.compression << ")";
    return os.str();
  }
  if (base.segment_bytes != other.segment_bytes) {
    os << "segment size " << other.segment_bytes << " bytes on rank " << other_rank << " vs " << base.segment_bytes
       << " on rank " << base_rank;
    return os.str();
  }
  os << "registration summaries differ (sizes or bucket plan)";
  return os.str();
}

void check_registration(Collectives& coll, const std::vector<GradientRef>& grads, const ReductionSettings& settings,
                        const std::vector<BucketPlan>& plans) {
  // a) one fixed-size summary per rank.
  const RegistrationSummary mine = summarize(grads, settings, plans.size());
  const int n = coll.size();
  std::vector<RegistrationSummary> all(static_cast<std::size_t>(n));
  coll.allgather(&mine, kSummaryWords, DataType::kInt64, all.data());
  int first_bad = -1;
  for (int r = 1; r < n && first_bad < 0; ++r) {
    if (!same(all[0], all[static_cast<std::size_t>(r)])) first_bad = r;
  }
  if (first_bad >= 0) {
    // b) every rank saw the same table and takes this branch: gather details.
    std::vector<int64_t> sizes, names;
    for (const auto& g : grads) {
      sizes.push_back(static_cast<int64_t>(g.size));
      names.push_back(name_hash(g.name));
    }
    std::vector<char> sizes_raw, names_raw;
    std::vector<std::size_t> counts;
    coll.allgatherv(sizes.data(), sizes.size(), DataType::kInt64, &sizes_raw, &counts);
    coll.allgatherv(names.data(), names.size(), DataType::kInt64, &names_raw, &counts);
    auto slice = [&](const std::vector<char>& raw, int rank) {
      std::size_t off = 0;
      for (int r = 0; r < rank; ++r) off += counts[static_cast<std::size_t>(r)];
      std::vector<int64_t> out(counts[static_cast<std::size_t>(rank)]);
      std::memcpy(out.data(), raw.data() + off * sizeof(int64_t), out.size() * sizeof(int64_t));
      return out;
    };
    throw MismatchError(describe_mismatch(0, all[0], slice(sizes_raw, 0), slice(names_raw, 0), first_bad,
                                          all[static_cast<std::size_t>(first_bad)], slice(sizes_raw, first_bad),
                                          slice(names_raw, first_bad)));
  }
  // c) exact per-bucket element counts: min == max on every bucket.
  if (plans.empty()) return;
  std::vector<int64_t> lo, hi;
  for (const auto& p : plans) lo.push_back(static_cast<int64_t>(p.elements));
  hi = lo;
  coll.allreduce(lo.data(), lo.size(), DataType::kInt64, comm::ReduceOp::kMin);
  coll.allreduce(hi.data(), hi.size(), DataType::kInt64, comm::ReduceOp::kMax);
  for (std::size_t b = 0; b < plans.size(); ++b) {
    if (lo[b] != hi[b]) {
      std::ostringstream os;
      os << "DistributedOptimizer: fusion bucket " << b << " holds between " << lo[b] << " and " << hi[b]
         << " elements across ranks (" << plans[b].elements << " here): the ranks registered different gradients";
      throw MismatchError(os.str());
    }
  }
}

}  // namespace muster::runtime::distributed
