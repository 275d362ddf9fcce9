// Fusion buckets: many small gradients reduced as one buffer.
//
// plan_buckets() cuts the registered gradients, in registration order, into
// runs of consecutive tensors holding at most `threshold_bytes` of float32
// (a tensor larger than the threshold gets a bucket of its own). A tensor
// flagged `alone` gets a bucket of its own and the run goes on past it, so
// the small tensors on either side still share one bucket (ResNet-50 with
// its gradients in the caller's buffers at 2 ranks on one host: 52 lone
// tensors and 2 packed buckets for the 109 small ones, the batch-norm pairs
// among them, where runs cut at every lone tensor made 53).
// The lone tensors passed over count towards the run's threshold: a run
// never spans more of the registration than a run of consecutive tensors
// could, so it waits no longer for backprop to reach its first tensor.
// Every rank computes the same plan from the same registration, so no
// negotiation is needed.
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
  std::vector<std::size_t> tensors;  // its tensors' indices, ascending
  std::size_t elements = 0;          // sum of their sizes

  std::size_t first() const { return tensors.empty() ? 0 : tensors.front(); }
  std::size_t count() const { return tensors.size(); }
};

// The plans come ordered by first(): the order backprop completes them in,
// read backwards (a bucket is whole once its first tensor is ready).
// `alone[i]` (when given, one flag per tensor) puts tensor i in a bucket of
// its own: DistributedOptimizer does so for a large gradient in the caller's
// own buffer, which a one-tensor bucket reduces in place instead of copying
// it into a fusion buffer and back. The run of other tensors goes on past it
// (its bucket then skips tensor i), tensor i's elements counting towards
// the run's threshold.
std::vector<BucketPlan> plan_buckets(const std::vector<std::size_t>& sizes, std::size_t threshold_bytes,
                                     const std::vector<bool>& alone = {});

class FusionBucket {
 public:
  // `grads` is the whole registration; the bucket covers plan's tensors of it.
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

  std::vector<GradientRef> grads_;  // this bucket's tensors
  std::vector<std::size_t> offsets_;  // wire offset of each of grads_
  bool fp16_;
  bool in_place_;
  std::vector<float> f32_;
  std::vector<uint16_t> f16_;
};

}  // namespace muster::runtime::distributed
