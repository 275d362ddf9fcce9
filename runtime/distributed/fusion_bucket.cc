#include "runtime/distributed/fusion_bucket.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "runtime/comm/half.h"
#include "runtime/error.h"

namespace muster::runtime::distributed {

std::vector<BucketPlan> plan_buckets(const std::vector<std::size_t>& sizes, std::size_t threshold_bytes,
                                     const std::vector<bool>& alone) {
  if (threshold_bytes == 0) throw InvalidArgument("fusion threshold must be at least 1 byte");
  if (!alone.empty() && alone.size() != sizes.size()) {
    throw InvalidArgument("plan_buckets: " + std::to_string(alone.size()) + " 'alone' flags for " +
                          std::to_string(sizes.size()) + " tensors");
  }
  auto is_alone = [&](std::size_t i) { return !alone.empty() && alone[i]; };
  std::vector<BucketPlan> plans;
  BucketPlan cur;
  // Elements from the run's first tensor to its last, lone ones passed over
  // included: what backprop computes between the run's first gradient and
  // its last, so a run waits no longer for its last one than a run of
  // consecutive tensors under the same threshold would.
  std::size_t span = 0;
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    if (is_alone(i)) {
      plans.push_back(BucketPlan{{i}, sizes[i]});
      if (cur.count() > 0) span += sizes[i];
      continue;
    }
    if (cur.count() > 0 && (span + sizes[i]) * sizeof(float) > threshold_bytes) {
      plans.push_back(std::move(cur));
      cur = BucketPlan{};
      span = 0;
    }
    cur.tensors.push_back(i);
    cur.elements += sizes[i];
    span += sizes[i];
  }
  if (cur.count() > 0) plans.push_back(std::move(cur));
  // A run is pushed when it ends, after the lone tensors inside it.
  std::stable_sort(plans.begin(), plans.end(),
                   [](const BucketPlan& a, const BucketPlan& b) { return a.first() < b.first(); });
  return plans;
}

FusionBucket::FusionBucket(const BucketPlan& plan, const std::vector<GradientRef>& grads, bool fp16)
    : plan_(plan), fp16_(fp16), in_place_(false) {
  for (const std::size_t t : plan.tensors) {
    MUSTER_CHECK_LT(t, grads.size(), "bucket plan names a tensor past the registered gradients");
    grads_.push_back(grads[t]);
  }
  std::size_t offset = 0;
  for (const auto& g : grads_) {
    offsets_.push_back(offset);
    offset += g.size;
  }
  MUSTER_CHECK_EQ(offset, plan.elements, "bucket plan and gradient sizes disagree");
  if (!fp16_) {
    // In place when the non-empty gradients are adjacent in the plan's order.
    const float* expect = nullptr;
    bool adjacent = true;
    for (const auto& g : grads_) {
      if (g.size == 0) continue;
      if (expect != nullptr && g.data != expect) {
        adjacent = false;
        break;
      }
      expect = g.data + g.size;
    }
    in_place_ = adjacent;
  }
  if (in_place_) return;
  if (fp16_) f16_.resize(plan_.elements);
  else f32_.resize(plan_.elements);
}

void* FusionBucket::wire_data() {
  if (in_place_) {
    for (const auto& g : grads_) {
      if (g.size != 0) return g.data;
    }
    return nullptr;
  }
  return fp16_ ? static_cast<void*>(f16_.data()) : static_cast<void*>(f32_.data());
}

// Calls f(gradient, first element in it, wire offset, count) for every
// piece of [begin, end) of the wire.
template <typename F>
void FusionBucket::for_range(std::size_t begin, std::size_t end, F&& f) {
  MUSTER_CHECK_LE(end, plan_.elements, "bucket range past its end");
  for (std::size_t t = 0; t < grads_.size(); ++t) {
    const std::size_t lo = offsets_[t], hi = lo + grads_[t].size;
    if (hi <= begin || grads_[t].size == 0) continue;
    if (lo >= end) break;
    const std::size_t from = std::max(lo, begin), to = std::min(hi, end);
    f(grads_[t], from - lo, from, to - from);
  }
}

void FusionBucket::pack(std::size_t begin, std::size_t end) {
  if (in_place_) return;
  for_range(begin, end, [&](const GradientRef& g, std::size_t at, std::size_t wire, std::size_t n) {
    if (fp16_) comm::float_to_half(g.data + at, f16_.data() + wire, n);
    else std::memcpy(f32_.data() + wire, g.data + at, n * sizeof(float));
  });
}

void FusionBucket::unpack(std::size_t begin, std::size_t end) {
  if (in_place_) return;
  for_range(begin, end, [&](const GradientRef& g, std::size_t at, std::size_t wire, std::size_t n) {
    if (fp16_) comm::half_to_float(f16_.data() + wire, g.data + at, n);
    else std::memcpy(g.data + at, f32_.data() + wire, n * sizeof(float));
  });
}

}  // namespace muster::runtime::distributed
