#include "muster/runtime/distributed/reduction_pipeline.h"

#include <algorithm>
#include <sstream>
#include <string>
#include <utility>

#include "muster/runtime/error.h"

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

struct ReductionPipeline::InFlight {
  std::size_t bucket = 0;
  std::unique_ptr<PendingOp> op;
  int64_t start_us = 0;
};

ReductionPipeline::ReductionPipeline(std::shared_ptr<Collectives> coll, const std::vector<GradientRef>& grads,
                                     const std::vector<BucketPlan>& plans, const PipelineOptions& options,
                                     std::shared_ptr<Timeline> timeline, Clock::time_point epoch)
    : coll_(std::move(coll)), options_(options), timeline_(std::move(timeline)), epoch_(epoch) {
  bucket_of_.resize(grads.size());
  for (std::size_t b = 0; b < plans.size(); ++b) {
    buckets_.push_back(std::make_unique<FusionBucket>(plans[b], grads, options.fp16));
    for (std::size_t i = plans[b].first; i < plans[b].first + plans[b].count; ++i) bucket_of_[i] = b;
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
    pending_[b] = buckets_[b]->plan().count;
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
  timeline_->complete({phase, "bucket", static_cast<int>(b) + 1, start_us, std::max<int64_t>(end_us - start_us, 0),
                       {{"step", step},
                        {"bucket", static_cast<int64_t>(b)},
                        {"tensors", static_cast<int64_t>(bucket.plan().count)},
                        {"bytes", static_cast<int64_t>(bucket.wire_bytes())}}});
}

void ReductionPipeline::finish(InFlight& f, int64_t step) {
  if (f.op) f.op->wait();
  const int64_t comm_end = now_us();
  record("allreduce", f.bucket, f.start_us, comm_end, step);
  buckets_[f.bucket]->unpack();
  record("unpack", f.bucket, comm_end, now_us(), step);
  std::lock_guard<std::mutex> lock(mu_);
  ++progress_;
}

void ReductionPipeline::run_step(int64_t step) {
  const std::size_t n = buckets_.size();
  std::unique_ptr<InFlight> prev;  // the bucket on the wire
  std::unique_ptr<InFlight> next;  // the one just started, while prev finishes
  std::size_t current = 0;
  bool stopped = false;
  try {
    for (std::size_t k = 0; k < n; ++k) {
      const std::size_t b = options_.reverse_order ? n - 1 - k : k;
      current = b;
      // 1. Wait for the bucket; finish the previous one as soon as it is done.
      int64_t ready_at = 0;
      for (;;) {
        std::unique_lock<std::mutex> lock(mu_);
        if (stop_) break;
        if (ready_us_[b] >= 0) {
          ready_at = ready_us_[b];
          break;
        }
        if (prev) {
          cv_.wait_for(lock, std::chrono::milliseconds(1));
          lock.unlock();
          if (!prev->op || prev->op->done()) {
            current = prev->bucket;
            finish(*prev, step);
            prev.reset();
            current = b;
          }
        } else {
          cv_.wait(lock);
        }
      }
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (stop_) {
          stopped = true;
          break;
        }
      }
      // 2. Pack.
      auto& bucket = *buckets_[b];
      const int64_t pack_start = now_us();
      record("queued", b, ready_at, pack_start, step);
      bucket.pack();
      // 3. Start its allreduce.
      next = std::make_unique<InFlight>();
      next->bucket = b;
      next->start_us = now_us();
      record("pack", b, pack_start, next->start_us, step);
      if (bucket.wire_count() > 0) {
        next->op = coll_->allreduce_async(bucket.wire_data(), bucket.wire_count(), bucket.wire_dtype(),
                                      comm::ReduceOp::kAverage, options_.algorithm);
      }
      // 4. Finish the previous bucket while this one is on the wire.
      if (prev) {
        current = prev->bucket;
        finish(*prev, step);
      }
      prev = std::move(next);
      current = b;
    }
    if (prev && !stopped) {
      current = prev->bucket;
      finish(*prev, step);
      prev.reset();
    }
  } catch (...) {
    // Never leave a collective writing into memory we are about to give back.
    for (auto* f : {prev.get(), next.get()}) {
      if (f == nullptr || !f->op) continue;
      try {
        f->op->wait();
      } catch (...) {
      }
    }
    std::ostringstream os;
    os << "DistributedOptimizer step " << step << ", fusion bucket " << current << " of " << n << ": ";
    rethrow_with_context(os.str());
  }
  if (prev && prev->op) prev->op->wait();  // stopped: let the op land, unpack nothing
}

}  // namespace muster::runtime::distributed
