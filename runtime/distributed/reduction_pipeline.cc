#include "runtime/distributed/reduction_pipeline.h"

#include <algorithm>
#include <sstream>
#include <string>
#include <utility>

#include "runtime/error.h"

namespace muster::runtime::distributed {
namespace {

// Rethrows the exception being handled with `context` in front, keeping its type.
[[noreturn]] void rethrow_with_context(const std::string& context) {
  try {
    throw;
  } catch (const TimeoutError& e) {
    throw TimeoutError(context + e.what(), e.rank());
  } catch (const CommError& e) {
    throw CommError(context + e.what(), e.rank());
  } catch (const MismatchError& e) {
    throw MismatchError(context + e.what());
  } catch (const InvalidArgument& e) {
    throw InvalidArgument(context + e.what());
  } catch (const Error& e) {
    throw Error(context + e.what());
  }
}

}  // namespace

struct ReductionPipeline::Segment {
  std::size_t bucket = 0;
  std::size_t begin = 0, end = 0;  // wire elements
  bool last = false;               // the bucket's last segment
  std::unique_ptr<PendingOp> op;
};

struct ReductionPipeline::BucketTimes {
  int64_t ready = 0, pack_start = 0, submitted = 0, first_unpack = -1;
};

ReductionPipeline::ReductionPipeline(std::shared_ptr<Collectives> coll, const std::vector<GradientRef>& grads,
                                     const std::vector<BucketPlan>& plans, const PipelineOptions& options,
                                     std::shared_ptr<Timeline> timeline, int timeline_pid,
                                     Clock::time_point epoch)
    : coll_(std::move(coll)),
      options_(options),
      timeline_(std::move(timeline)),
      timeline_pid_(timeline_pid),
      epoch_(epoch) {
  bucket_of_.resize(grads.size());
  for (std::size_t b = 0; b < plans.size(); ++b) {
    buckets_.push_back(std::make_unique<FusionBucket>(plans[b], grads, options.fp16));
    for (const std::size_t i : plans[b].tensors) bucket_of_[i] = b;
  }
  marked_.assign(grads.size(), 0);
  pending_.resize(buckets_.size());
  ready_us_.resize(buckets_.size());
  begin_step();
}

int64_t ReductionPipeline::now_us() const {
  return std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - epoch_).count();
}

void ReductionPipeline::begin_step() {
  std::lock_guard<std::mutex> lock(mu_);
  std::fill(marked_.begin(), marked_.end(), 0);
  for (std::size_t b = 0; b < buckets_.size(); ++b) {
    pending_[b] = buckets_[b]->plan().count();
    ready_us_[b] = -1;
  }
}

void ReductionPipeline::mark_ready(std::size_t index) {
  std::lock_guard<std::mutex> lock(mu_);
  if (index >= marked_.size()) {
    throw InvalidArgument("grad_ready(" + std::to_string(index) + "): only " + std::to_string(marked_.size()) +
                          " gradients are registered");
  }
  if (marked_[index]) {
    throw InvalidArgument("grad_ready(" + std::to_string(index) +
                          ") called twice in one step; call synchronize() or step() between backward passes");
  }
  marked_[index] = 1;
  const std::size_t b = bucket_of_[index];
  if (--pending_[b] == 0) {
    ready_us_[b] = now_us();
    cv_.notify_all();
  }
}

void ReductionPipeline::mark_all_ready() {
  std::lock_guard<std::mutex> lock(mu_);
  const int64_t now = now_us();
  for (std::size_t i = marked_.size(); i-- > 0;) {
    if (marked_[i]) continue;
    marked_[i] = 1;
    const std::size_t b = bucket_of_[i];
    if (--pending_[b] == 0) ready_us_[b] = now;
  }
  cv_.notify_all();
}

void ReductionPipeline::stop() {
  std::lock_guard<std::mutex> lock(mu_);
  stop_ = true;
  cv_.notify_all();
}

int64_t ReductionPipeline::progress() const {
  std::lock_guard<std::mutex> lock(mu_);
  return progress_;
}

void ReductionPipeline::record(const char* phase, std::size_t b, int64_t start_us, int64_t end_us, int64_t step) {
  if (!timeline_) return;
  const auto& bucket = *buckets_[b];
  timeline_->complete({phase, "bucket", timeline_pid_, static_cast<int>(b) + 1, start_us, std::max<int64_t>(end_us - start_us, 0),
                       {{"step", step},
                        {"bucket", static_cast<int64_t>(b)},
                        {"tensors", static_cast<int64_t>(bucket.plan().count())},
                        {"bytes", static_cast<int64_t>(bucket.wire_bytes())}}});
}

void ReductionPipeline::drain(std::deque<Segment>& inflight, std::vector<BucketTimes>& times, bool block,
                              int64_t step) {
  while (!inflight.empty()) {
    Segment& seg = inflight.front();
    if (!block && seg.op && !seg.op->done()) return;
    if (seg.op) seg.op->wait();
    const std::size_t b = seg.bucket;
    const int64_t done_at = now_us();
    if (times[b].first_unpack < 0) times[b].first_unpack = done_at;
    buckets_[b]->unpack(seg.begin, seg.end);
    {
      std::lock_guard<std::mutex> lock(mu_);
      ++progress_;
    }
    if (seg.last) {
      const int64_t end = now_us();
      record("queued", b, times[b].ready, times[b].pack_start, step);
      record("pack", b, times[b].pack_start, times[b].submitted, step);
      record("allreduce", b, times[b].submitted, std::max(done_at, times[b].submitted), step);
      record("unpack", b, std::max(done_at, times[b].submitted), end, step);
    }
    inflight.pop_front();
  }
}

void ReductionPipeline::run_step(int64_t step) {
  const std::size_t n = buckets_.size();
  std::deque<Segment> inflight;  // started, not yet unpacked; completes in order
  std::vector<BucketTimes> times(n);
  std::size_t current = 0;
  bool stopped = false;
  const std::size_t segment_elements =
      options_.segment_bytes == 0 ? 0 : std::max<std::size_t>(options_.segment_bytes / sizeof(float), 1);
  try {
    for (std::size_t k = 0; k < n && !stopped; ++k) {
      const std::size_t b = options_.reverse_order ? n - 1 - k : k;
      current = b;
      // 1. Wait for the bucket, unpacking finished segments meanwhile.
      for (;;) {
        std::unique_lock<std::mutex> lock(mu_);
        if (stop_) {
          stopped = true;
          break;
        }
        if (ready_us_[b] >= 0) {
          times[b].ready = ready_us_[b];
          break;
        }
        if (inflight.empty()) {
          cv_.wait(lock);
        } else {
          cv_.wait_for(lock, std::chrono::milliseconds(1));
          lock.unlock();
          drain(inflight, times, false, step);
        }
      }
      if (stopped) break;
      // 2. Pack and start it segment by segment.
      auto& bucket = *buckets_[b];
      times[b].pack_start = now_us();
      const std::size_t total = bucket.wire_count();
      // Segments let packing overlap the wire; an in-place bucket has nothing
      // to pack, so it goes as one allreduce (the ring pipelines it anyway).
      const std::size_t seg = segment_elements == 0 || bucket.in_place() ? std::max<std::size_t>(total, 1)
                                                                         : segment_elements;
      for (std::size_t begin = 0; begin < total || (total == 0 && begin == 0); begin += seg) {
        Segment s;
        s.bucket = b;
        s.begin = begin;
        s.end = std::min(total, begin + seg);
        s.last = s.end >= total;
        bucket.pack(s.begin, s.end);
        if (s.end > s.begin) {
          s.op = coll_->allreduce_async(bucket.wire_at(s.begin), s.end - s.begin, bucket.wire_dtype(),
                                        comm::ReduceOp::kAverage, options_.algorithm);
        }
        if (s.last) times[b].submitted = now_us();
        inflight.push_back(std::move(s));
        // 3. Unpack whatever has come back.
        drain(inflight, times, false, step);
        if (total == 0) break;
      }
    }
    if (!stopped) drain(inflight, times, true, step);
  } catch (...) {
    // Never leave a collective writing into memory we are about to give back.
    for (auto& s : inflight) {
      if (!s.op) continue;
      try {
        s.op->wait();
      } catch (...) {
      }
    }
    std::ostringstream os;
    os << "DistributedOptimizer step " << step << ", fusion bucket " << current << " of " << n << ": ";
    rethrow_with_context(os.str());
  }
  // Stopped (shutdown): let the ops land, unpack nothing.
  for (auto& s : inflight) {
    if (s.op) s.op->wait();
  }
}

}  // namespace muster::runtime::distributed
