// ReductionPipeline: one step's gradient averaging, bucket by bucket.
//
// The user thread marks gradients ready (mark_ready); the communication
// thread runs run_step(), which for each bucket in the fixed order
// (last-first by default, as backprop fills them):
//   1. waits until all the bucket's gradients are marked ready,
//   2. cuts the bucket into segments of at most segment_bytes and, segment
//      by segment, packs it into the fusion buffer and starts its allreduce
//      (average), so packing segment k+1 overlaps segment k on the wire (an
//      in-place bucket has nothing to pack and goes as one allreduce),
//   3. after each start, and while waiting for the next bucket, unpacks
//      every segment whose allreduce is done (the collectives complete in
//      submission order, so it keeps a FIFO of segments in flight),
// and finally waits for and unpacks what is left. The fixed bucket order is
// what makes ranks issue the same collectives in the same order whatever
// order their gradients become ready in.
//
// Timeline rows (one per bucket) show four consecutive phases: "queued"
// (ready until packing starts), "pack" (until its last segment was started),
// "allreduce" (until its last segment was seen done) and "unpack" (until its
// last segment was unpacked); a phase ends when the bucket's last segment
// leaves it, earlier segments run ahead.
//
// Errors from the collectives leave run_step() as the same exception type
// (TimeoutError, CommError keep the rank) with the bucket and step added.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <vector>

#include "runtime/distributed/collectives.h"
#include "runtime/distributed/fusion_bucket.h"
#include "runtime/distributed/timeline.h"

namespace muster::runtime::distributed {

struct PipelineOptions {
  bool fp16 = false;
  comm::Algorithm algorithm = comm::Algorithm::kAuto;
  bool reverse_order = true;
  // Largest single allreduce, in float32 bytes of gradients (0: whole bucket).
  std::size_t segment_bytes = 1u << 20;
};

class ReductionPipeline {
 public:
  using Clock = std::chrono::steady_clock;

  // `timeline` may be null; events go to its process `timeline_pid`.
  // Timestamps are microseconds since `epoch`.
  ReductionPipeline(std::shared_ptr<Collectives> coll, const std::vector<GradientRef>& grads,
                    const std::vector<BucketPlan>& plans, const PipelineOptions& options,
                    std::shared_ptr<Timeline> timeline, int timeline_pid, Clock::time_point epoch);

  std::size_t bucket_count() const { return buckets_.size(); }
  const FusionBucket& bucket(std::size_t b) const { return *buckets_[b]; }

  // --- user thread ---
  // Clears every ready mark; the previous run_step() must have returned.
  void begin_step();
  // Throws InvalidArgument when `index` was already marked this step.
  void mark_ready(std::size_t index);
  // Marks every gradient not yet marked, last first.
  void mark_all_ready();
  // Makes a running or later run_step() return early (at shutdown).
  void stop();
  // Segments finished since construction (for the caller's watchdog).
  int64_t progress() const;

  // --- communication thread ---
  void run_step(int64_t step);

  int64_t now_us() const;

 private:
  struct Segment;
  struct BucketTimes;
  // Unpacks finished segments from the front of `inflight`; with `block`,
  // waits for all of them.
  void drain(std::deque<Segment>& inflight, std::vector<BucketTimes>& times, bool block, int64_t step);
  void record(const char* phase, std::size_t b, int64_t start_us, int64_t end_us, int64_t step);

  std::shared_ptr<Collectives> coll_;
  PipelineOptions options_;
  std::shared_ptr<Timeline> timeline_;
  int timeline_pid_;
  Clock::time_point epoch_;
  std::vector<std::unique_ptr<FusionBucket>> buckets_;
  std::vector<std::size_t> bucket_of_;  // gradient index -> bucket

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<char> marked_;           // per gradient
  std::vector<std::size_t> pending_;   // per bucket: gradients not yet marked
  std::vector<int64_t> ready_us_;      // per bucket: when it became ready, -1 before
  bool stop_ = false;
  int64_t progress_ = 0;
};

}  // namespace muster::runtime::distributed
