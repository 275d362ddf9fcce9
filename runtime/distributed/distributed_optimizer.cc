#include "runtime/distributed/distributed_optimizer.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <future>
#include <string>
#include <utility>

#include "api/base/settings.h"
#include "runtime/distributed/broadcast.h"
#include "runtime/distributed/comm_thread.h"
#include "runtime/distributed/reduction_pipeline.h"
#include "runtime/distributed/registration_check.h"
#include "runtime/distributed/timeline.h"
#include "runtime/error.h"

namespace muster::runtime::distributed {
namespace {

// Both variables through the one settings reader (api/base/settings.h).
std::size_t resolve_threshold(std::size_t configured) {
  if (configured != 0) return configured;
  const auto env = base::Settings::environment();
  const auto mb = env.number("MUSTER_FUSION_THRESHOLD_MB", 0, 1e-9, 1e9);
  if (!mb.ok()) throw InvalidArgument(mb.error + " (megabytes)");
  if (!mb.given) {
    // Horovod's variable (bytes; 0 turns fusion off), as horovodrun
    // --fusion-threshold-mb and musterd's mpi clusters export it.
    const auto hvd = env.number("HOROVOD_FUSION_THRESHOLD", 0, 0, 1e18);
    if (!hvd.ok()) throw InvalidArgument(hvd.error + " (bytes)");
    if (!hvd.given) return kDefaultFusionThresholdBytes;
    return hvd.value < 1.0 ? 1 : static_cast<std::size_t>(hvd.value);
  }
  const double bytes = mb.value * 1024.0 * 1024.0;
  return bytes < 1.0 ? 1 : static_cast<std::size_t>(bytes);
}

DistributedOptions resolve(DistributedOptions o) {
  o.fusion_threshold_bytes = resolve_threshold(o.fusion_threshold_bytes);
  if (o.timeline_path.empty()) {
    const auto env = base::Settings::environment();
    o.timeline_path = env.text("MUSTER_TIMELINE", env.text("HOROVOD_TIMELINE").value).value;  // horovodrun --timeline-filename
  }
  return o;
}

// One time base for every optimizer of the process (they may share a timeline).
ReductionPipeline::Clock::time_point process_epoch() {
  static const auto epoch = ReductionPipeline::Clock::now();
  return epoch;
}

}  // namespace

std::size_t auto_in_place_min_bytes(int ranks, bool one_host, long host_cpus) {
  const bool small_path_rounds = one_host && comm::private_allreduce_in_pieces(ranks, host_cpus);
  return small_path_rounds ? std::size_t{64} << 10 : std::size_t{1} << 20;
}

const char* compression_name(Compression c) {
  switch (c) {
    case Compression::kNone: return "none";
    case Compression::kFp16: return "fp16";
  }
  return "unknown";
}

struct DistributedOptimizer::Impl {
  std::shared_ptr<Collectives> coll;
  std::vector<GradientRef> grads;
  std::vector<float*> values;
  std::vector<bool> owned;     // gradient lives in `arena` (add_parameter got nullptr)
  std::unique_ptr<comm::SharedBuffer> arena;  // owned gradients, back to back in registration order
  std::shared_ptr<Timeline> timeline;  // shared with other optimizers on the same path
  int timeline_pid = 0;
  ReductionPipeline::Clock::time_point epoch = process_epoch();
  std::shared_ptr<ReductionPipeline> pipeline;  // created by start()
  std::shared_ptr<SharedCommThread> comm_thread;  // shared by the optimizers of one communicator
  bool started = false;
  bool step_in_flight = false;
  int64_t step = 0;
  int64_t step_start_us = 0;
  std::shared_future<void> step_done;
  // Set when wait() gave up on a stuck thread: every later call rethrows it.
  std::exception_ptr broken;

  void check_usable() const {
    if (broken) std::rethrow_exception(broken);
  }

  // Another optimizer on the same communicator with a step in flight would
  // have our jobs queue behind its step, which waits for its gradients.
  void check_no_other_step(const char* call) const {
    const void* owner = comm_thread->step_owner;
    if (owner != nullptr && owner != this) {
      throw InvalidArgument(std::string(call) +
                            ": another DistributedOptimizer on this communicator has a step in flight; call its "
                            "synchronize() or step() first");
    }
  }

  // Waits for a job, rethrowing its error. For a step (`guard`), also guards
  // against a communication thread that stops making progress even though
  // the collectives promise a watchdog: no segment finished for
  // 2 x timeout + 30 s -> TimeoutError. (Other jobs are single collectives
  // bounded by the Communicator's own watchdog.)
  void wait(const std::shared_future<void>& done, bool guard = false) {
    if (!guard) {
      done.get();
      return;
    }
    const auto limit = 2 * coll->timeout() + std::chrono::seconds(30);
    int64_t seen = pipeline ? pipeline->progress() : 0;
    for (;;) {
      if (done.wait_for(limit) == std::future_status::ready) break;
      const int64_t now = pipeline ? pipeline->progress() : 0;
      if (now == seen) {
        broken = std::make_exception_ptr(TimeoutError("DistributedOptimizer: the communication thread made no progress for " +
                               std::to_string(std::chrono::duration_cast<std::chrono::seconds>(limit).count()) +
                               " s; a peer is probably stuck (check the other ranks' logs)",
                           -1));
        if (pipeline) pipeline->stop();
        std::rethrow_exception(broken);
      }
      seen = now;
    }
    done.get();
  }
};

DistributedOptimizer::DistributedOptimizer(comm::Communicator& comm, std::unique_ptr<optim::Optimizer> optimizer,
                                           const DistributedOptions& options)
    : DistributedOptimizer(wrap_communicator(comm), std::move(optimizer), options) {}

DistributedOptimizer::DistributedOptimizer(std::unique_ptr<Collectives> collectives,
                                           std::unique_ptr<optim::Optimizer> optimizer,
                                           const DistributedOptions& options)
    : options_(resolve(options)), optimizer_(std::move(optimizer)), impl_(std::make_unique<Impl>()) {
  if (!optimizer_) throw InvalidArgument("DistributedOptimizer needs an optimizer to wrap");
  if (!collectives) throw InvalidArgument("DistributedOptimizer needs collectives");
  impl_->coll = std::move(collectives);
  impl_->comm_thread = SharedCommThread::acquire(impl_->coll->identity());
  if (!options_.timeline_path.empty() && impl_->coll->rank() == 0) {
    try {
      impl_->timeline = Timeline::open(options_.timeline_path);
      impl_->timeline_pid = impl_->timeline->next_pid();
      impl_->timeline->name_process(impl_->timeline_pid,
                                    "muster rank 0: DistributedOptimizer #" + std::to_string(impl_->timeline_pid));
      impl_->timeline->name_row(impl_->timeline_pid, 0, "steps (user thread)");
    } catch (const Error& e) {
      std::fprintf(stderr, "muster: no timeline: %s\n", e.what());
    }
  }
}

DistributedOptimizer::~DistributedOptimizer() {
  if (impl_->pipeline) impl_->pipeline->stop();
  if (impl_->comm_thread->step_owner == impl_.get()) impl_->comm_thread->step_owner = nullptr;
  // The last optimizer on the communicator stops the thread, waiting at most
  // a collective's timeout for it.
  if (impl_->comm_thread.use_count() == 1) {
    impl_->comm_thread->thread.shutdown(impl_->coll->timeout() + std::chrono::seconds(5));
  }
  impl_->timeline.reset();  // the last optimizer on a path closes its file
}

int DistributedOptimizer::add_parameter(const std::string& name, float* value, float* grad, std::size_t size) {
  if (impl_->started) {
    throw InvalidArgument("add_parameter('" + name +
                          "') after the first step or broadcast: register every parameter first");
  }
  if (size > 0 && value == nullptr) throw InvalidArgument("add_parameter('" + name + "'): null value buffer");
  impl_->owned.push_back(grad == nullptr);
  impl_->grads.push_back({name, grad, size});
  impl_->values.push_back(value);
  return static_cast<int>(impl_->grads.size() - 1);
}

// First use: fixes the bucket plan, runs the registration check and
// allocates the owned gradients, on the communication thread, before any
// bucket or broadcast on every rank. It waits for both: the user thread may
// use the communicator directly right after (broadcast the start step, say),
// and its collectives must not race these into a different order on
// different ranks.
static void start(DistributedOptimizer::Impl& impl, const DistributedOptions& options) {
  if (impl.started) return;
  impl.started = true;
  const std::size_t in_place_min =
      options.in_place_min_bytes != kAutoInPlaceMinBytes
          ? options.in_place_min_bytes
          : auto_in_place_min_bytes(impl.coll->size(), impl.coll->shares_host_memory(), sysconf(_SC_NPROCESSORS_ONLN));
  std::vector<std::size_t> sizes;
  std::vector<bool> alone;
  for (std::size_t i = 0; i < impl.grads.size(); ++i) {
    sizes.push_back(impl.grads[i].size);
    alone.push_back(!impl.owned[i] && options.compression == Compression::kNone && in_place_min > 0 &&
                    impl.grads[i].size * sizeof(float) >= in_place_min);
  }
  const auto plans = plan_buckets(sizes, options.fusion_threshold_bytes, alone);
  ReductionSettings settings;
  settings.threshold_bytes = options.fusion_threshold_bytes;
  settings.compression = static_cast<int>(options.compression);
  settings.segment_bytes = options.segment_bytes;
  // A failure here leaves no pipeline: the optimizer is broken and every
  // later call rethrows it.
  auto run = [&impl](CommThread::Job job) {
    try {
      impl.wait(impl.comm_thread->thread.submit(std::move(job)));
    } catch (...) {
      impl.broken = std::current_exception();
      throw;
    }
  };
  run([coll = impl.coll, grads = impl.grads, settings, plans] { check_registration(*coll, grads, settings, plans); });

  // The gradients we own, back to back in memory the other ranks of this
  // host can read (a collective, hence on the communication thread too): a
  // bucket of them is reduced in place, by the direct allreduce where the
  // whole job shares a host.
  std::size_t owned_total = 0;
  for (std::size_t i = 0; i < impl.grads.size(); ++i) {
    if (impl.owned[i]) owned_total += impl.grads[i].size;
  }
  if (owned_total > 0) {
    auto arena = std::make_shared<std::unique_ptr<comm::SharedBuffer>>();
    run([coll = impl.coll, arena, bytes = owned_total * sizeof(float)] { *arena = coll->allocate_shared(bytes); });
    impl.arena = std::move(*arena);
    float* base = static_cast<float*>(impl.arena->data());
    std::size_t offset = 0;
    for (std::size_t i = 0; i < impl.grads.size(); ++i) {
      if (!impl.owned[i]) continue;
      impl.grads[i].data = base + offset;
      offset += impl.grads[i].size;
    }
  }

  PipelineOptions po;
  po.fp16 = options.compression == Compression::kFp16;
  po.algorithm = options.algorithm;
  po.reverse_order = options.reverse_bucket_order;
  po.segment_bytes = options.segment_bytes;
  impl.pipeline = std::make_shared<ReductionPipeline>(impl.coll, impl.grads, plans, po, impl.timeline,
                                                      impl.timeline_pid, impl.epoch);
  if (impl.timeline) {
    for (std::size_t b = 0; b < plans.size(); ++b) {
      const auto& bucket = impl.pipeline->bucket(b);
      char label[160];
      std::snprintf(label, sizeof label, "bucket %zu: %zu tensors, %.2f MB%s", b, plans[b].count(),
                    static_cast<double>(bucket.wire_bytes()) / (1 << 20), bucket.in_place() ? ", in place" : "");
      impl.timeline->name_row(impl.timeline_pid, static_cast<int>(b) + 1, label);
    }
  }
}

static void begin_step(DistributedOptimizer::Impl& impl) {
  impl.check_no_other_step("grad_ready/synchronize");
  // A peer gone since the last step (a killed rank): fail this step at its
  // first gradient, before the rest of the backward pass is computed for an
  // allreduce that cannot finish (an elastic run re-forms that much sooner:
  // with bench/elastic's model the backward of its largest layer).
  try {
    impl.coll->check_peers();
  } catch (const CommError& e) {
    impl.broken = std::make_exception_ptr(
        CommError("DistributedOptimizer step " + std::to_string(impl.step) + ", at its first gradient: " + e.what(),
                  e.rank()));
    std::rethrow_exception(impl.broken);
  }
  impl.comm_thread->step_owner = &impl;
  impl.pipeline->begin_step();
  impl.step_in_flight = true;
  impl.step_start_us = impl.pipeline->now_us();
  const int64_t step = impl.step;
  impl.step_done = impl.comm_thread->thread.submit([pipeline = impl.pipeline, step] { pipeline->run_step(step); });
}

float* DistributedOptimizer::gradient(int index) {
  if (index < 0 || static_cast<std::size_t>(index) >= impl_->grads.size()) {
    throw InvalidArgument("gradient(" + std::to_string(index) + "): only " + std::to_string(impl_->grads.size()) +
                          " parameters are registered");
  }
  impl_->check_usable();
  start(*impl_, options_);
  return impl_->grads[static_cast<std::size_t>(index)].data;
}

void DistributedOptimizer::grad_ready(int index) {
  impl_->check_usable();
  start(*impl_, options_);
  if (index < 0) throw InvalidArgument("grad_ready(" + std::to_string(index) + "): negative index");
  if (!impl_->step_in_flight) begin_step(*impl_);
  // A bucket of this step already failed (a peer died): say so now rather
  // than at synchronize(), so the caller stops its backward pass at once (an
  // elastic run re-forms its world that much sooner).
  if (impl_->step_done.valid() &&
      impl_->step_done.wait_for(std::chrono::seconds(0)) == std::future_status::ready) {
    try {
      impl_->step_done.get();
    } catch (...) {
      impl_->broken = std::current_exception();
      if (impl_->pipeline) impl_->pipeline->stop();
      throw;
    }
  }
  impl_->pipeline->mark_ready(static_cast<std::size_t>(index));
}

void DistributedOptimizer::synchronize() {
  impl_->check_usable();
  start(*impl_, options_);
  if (!impl_->step_in_flight) begin_step(*impl_);
  impl_->pipeline->mark_all_ready();
  const int64_t step = impl_->step;
  impl_->step_in_flight = false;
  ++impl_->step;
  impl_->comm_thread->step_owner = nullptr;
  impl_->wait(impl_->step_done, /*guard=*/true);
  if (impl_->timeline) {
    const int64_t end = impl_->pipeline->now_us();
    impl_->timeline->complete({"step " + std::to_string(step), "step", impl_->timeline_pid, 0, impl_->step_start_us,
                               end - impl_->step_start_us, {{"step", step}}});
  }
}

void DistributedOptimizer::step() {
  synchronize();
  std::vector<optim::ParamRef> params;
  params.reserve(impl_->grads.size());
  for (std::size_t i = 0; i < impl_->grads.size(); ++i) {
    params.push_back({impl_->values[i], impl_->grads[i].data, impl_->grads[i].size});
  }
  optimizer_->step(params);
}

static void check_root(int root, int size) {
  if (root < 0 || root >= size) {
    throw InvalidArgument("broadcast root " + std::to_string(root) + " is not a rank (world size " +
                          std::to_string(size) + ")");
  }
}

void DistributedOptimizer::broadcast_parameters(int root) {
  impl_->check_usable();
  impl_->check_no_other_step("broadcast_parameters");
  check_root(root, size());
  if (impl_->step_in_flight) synchronize();
  start(*impl_, options_);
  std::vector<GradientRef> values;
  for (std::size_t i = 0; i < impl_->grads.size(); ++i) {
    values.push_back({impl_->grads[i].name, impl_->values[i], impl_->grads[i].size});
  }
  const std::size_t chunk = options_.fusion_threshold_bytes;
  impl_->wait(impl_->comm_thread->thread.submit([coll = impl_->coll, values, root, chunk] {
    broadcast_buffers(*coll, values, root, chunk);
  }));
}

void DistributedOptimizer::broadcast_optimizer_state(int root) {
  impl_->check_usable();
  impl_->check_no_other_step("broadcast_optimizer_state");
  check_root(root, size());
  if (impl_->step_in_flight) synchronize();
  start(*impl_, options_);
  if (optimizer_->state().empty()) {
    std::vector<std::size_t> sizes;
    for (const auto& g : impl_->grads) sizes.push_back(g.size);
    optimizer_->init(sizes);
  }
  std::vector<GradientRef> buffers;
  int64_t shape[2] = {0, 0};  // state buffer count, total elements
  for (const auto& s : optimizer_->state()) {
    buffers.push_back({s.name, s.data, s.size});
    ++shape[0];
    shape[1] += static_cast<int64_t>(s.size);
  }
  const std::size_t chunk = options_.fusion_threshold_bytes;
  optim::Optimizer* opt = optimizer_.get();
  impl_->wait(impl_->comm_thread->thread.submit([coll = impl_->coll, buffers, root, chunk, opt, shape] {
    // The state layouts must agree before their bytes are exchanged.
    int64_t lo[2] = {shape[0], shape[1]}, hi[2] = {shape[0], shape[1]};
    coll->allreduce(lo, 2, DataType::kInt64, comm::ReduceOp::kMin);
    coll->allreduce(hi, 2, DataType::kInt64, comm::ReduceOp::kMax);
    if (lo[0] != hi[0] || lo[1] != hi[1]) {
      throw MismatchError("broadcast_optimizer_state: ranks hold different optimizer state (" +
                          std::to_string(shape[0]) + " buffers, " + std::to_string(shape[1]) +
                          " floats here); wrap the same optimizer type on every rank");
    }
    broadcast_buffers(*coll, buffers, root, chunk);
    double scalars[2] = {static_cast<double>(opt->iterations()), static_cast<double>(opt->learning_rate())};
    coll->broadcast(scalars, 2, DataType::kFloat64, root);
    opt->set_iterations(static_cast<int64_t>(scalars[0]));
    opt->set_learning_rate(static_cast<float>(scalars[1]));
  }));
}

double DistributedOptimizer::metric_average(double value) {
  impl_->check_usable();
  impl_->check_no_other_step("metric_average");
  if (impl_->step_in_flight) synchronize();
  auto v = std::make_shared<double>(value);
  impl_->wait(impl_->comm_thread->thread.submit([coll = impl_->coll, v] {
    coll->allreduce(v.get(), 1, DataType::kFloat64, comm::ReduceOp::kAverage);
  }));
  return *v;
}

float DistributedOptimizer::metric_average(float value) {
  return static_cast<float>(metric_average(static_cast<double>(value)));
}

int DistributedOptimizer::rank() const { return impl_->coll->rank(); }
int DistributedOptimizer::size() const { return impl_->coll->size(); }

std::size_t DistributedOptimizer::bucket_count() const {
  return impl_->pipeline ? impl_->pipeline->bucket_count() : 0;
}

std::unique_ptr<comm::SharedBuffer> DistributedOptimizer::release_gradient_memory() {
  return std::move(impl_->arena);
}

bool DistributedOptimizer::gradients_direct() const { return impl_->arena && impl_->arena->direct(); }

void broadcast_parameters(comm::Communicator& comm, const std::vector<optim::ParamRef>& params, int root) {
  auto coll = wrap_communicator(comm);
  std::vector<GradientRef> values;
  for (const auto& p : params) values.push_back({"", p.value, p.size});
  broadcast_buffers(*coll, values, root, kDefaultFusionThresholdBytes);
}

}  // namespace muster::runtime::distributed
