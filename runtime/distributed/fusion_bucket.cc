#include "muster/runtime/distributed/fusion_bucket.h"

#include <cstring>

#include "muster/runtime/comm/half.h"
#include "muster/runtime/error.h"

namespace muster::runtime::distributed {

std::vector<BucketPlan> plan_buckets(const std::vector<std::size_t>& sizes, std::size_t threshold_bytes) {
  if (threshold_bytes == 0) throw InvalidArgument("fusion threshold must be at least 1 byte");
  std::vector<BucketPlan> plans;
  BucketPlan cur;
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    const std::size_t bytes = sizes[i] * sizeof(float);
    if (cur.count > 0 && (cur.elements * sizeof(float) + bytes > threshold_bytes)) {
      plans.push_back(cur);
      cur = BucketPlan{i, 0, 0};
    }
    if (cur.count == 0) cur.first = i;
    ++cur.count;
    cur.elements += sizes[i];
  }
  if (cur.count > 0) plans.push_back(cur);
  return plans;
}

FusionBucket::FusionBucket(const BucketPlan& plan, const std::vector<GradientRef>& grads, bool fp16)
    : plan_(plan), fp16_(fp16), in_place_(false) {
  MUSTER_CHECK_LE(plan.first + plan.count, grads.size(), "bucket plan runs past the registered gradients");
  grads_.assign(grads.begin() + static_cast<std::ptrdiff_t>(plan.first),
                grads.begin() + static_cast<std::ptrdiff_t>(plan.first + plan.count));
  if (!fp16_) {
    // In place when the non-empty gradients are adjacent in registration order.
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

void FusionBucket::pack() {
  if (in_place_) return;
  std::size_t off = 0;
  for (const auto& g : grads_) {
    if (g.size == 0) continue;
    if (fp16_) comm::float_to_half(g.data, f16_.data() + off, g.size);
    else std::memcpy(f32_.data() + off, g.data, g.size * sizeof(float));
    off += g.size;
  }
}

void FusionBucket::unpack() {
  if (in_place_) return;
  std::size_t off = 0;
  for (const auto& g : grads_) {
    if (g.size == 0) continue;
    if (fp16_) comm::half_to_float(f16_.data() + off, g.data, g.size);
    else std::memcpy(g.data, f32_.data() + off, g.size * sizeof(float));
    off += g.size;
  }
}

}  // namespace muster::runtime::distributed
