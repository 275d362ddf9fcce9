// Fusion buckets: many small gradients reduced as one buffer.
//
// plan_buckets() cuts the registered gradients, in registration order, into
// runs of consecutive tensors holding at most `threshold_bytes` of float32
// (a tensor larger than the threshold gets a bucket of its own). Every rank
// computes the same plan from the same registration, so no negotiation is
// needed.
//
// A FusionBucket owns the wire buffer of one run: pack() copies (or converts
// to float16) the gradients into it, the allreduce works on wire_data(),
// unpack() copies the result back. When the run's float32 gradients already
// lie back to back in memory and no compression is asked, the bucket is
// "in place": wire_data() points at the gradients themselves and pack() /
// unpack() do nothing (zero copy).
//
// Not thread-safe; DistributedOptimizer's communication thread uses it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "runtime/dtype.h"

namespace muster::runtime::distributed {

// One registered gradient: a view of the caller's float32 memory.
struct GradientRef {
  std::string name;
  float* data = nullptr;
  std::size_t size = 0;
};

struct BucketPlan {
  std::size_t first = 0;     // index of its first tensor
  std::size_t count = 0;     // number of tensors
  std::size_t elements = 0;  // sum of their sizes
};

// `alone[i]` (when given, one flag per tensor) puts tensor i in a bucket of
// its own, breaking the run around it: DistributedOptimizer does so for a
// large gradient in the caller's own buffer, which a one-tensor bucket
// reduces in place instead of copying it into a fusion buffer and back.
std::vector<BucketPlan> plan_buckets(const std::vector<std::size_t>& sizes, std::size_t threshold_bytes,
                                     const std::vector<bool>& alone = {});

class FusionBucket {
 public:
  // `grads` is the whole registration; the bucket covers plan's run of it.
  // fp16: the wire format is float16 (Horovod's Compression.fp16).
  FusionBucket(const BucketPlan& plan, const std::vector<GradientRef>& grads, bool fp16);

  const BucketPlan& plan() const { return plan_; }
  bool in_place() const { return in_place_; }
  DataType wire_dtype() const { return fp16_ ? DataType::kFloat16 : DataType::kFloat32; }
  std::size_t wire_count() const { return plan_.elements; }
  std::size_t wire_bytes() const { return plan_.elements * dtype_size(wire_dtype()); }
  void* wire_data();
  // The wire buffer from element `element` on.
  void* wire_at(std::size_t element) {
    return static_cast<char*>(wire_data()) + element * dtype_size(wire_dtype());
  }

  // Gradients -> wire buffer, and back. No-ops when in_place().
  void pack() { pack(0, plan_.elements); }
  void unpack() { unpack(0, plan_.elements); }
  // The same for wire elements [begin, end) only (a segment of the bucket).
  void pack(std::size_t begin, std::size_t end);
  void unpack(std::size_t begin, std::size_t end);

 private:
  BucketPlan plan_;
  template <typename F>
  void for_range(std::size_t begin, std::size_t end, F&& f);

  std::vector<GradientRef> grads_;  // this bucket's run
  std::vector<std::size_t> offsets_;  // wire offset of each of grads_
  bool fp16_;
  bool in_place_;
  std::vector<float> f32_;
  std::vector<uint16_t> f16_;
};

}  // namespace muster::runtime::distributed
