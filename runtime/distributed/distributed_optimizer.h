// DistributedOptimizer: Horovod-style data-parallel training over the
// collectives of runtime/comm/.
//
// It wraps an optim::Optimizer. Every rank registers its parameters (value
// and gradient buffers, float32) in the same fixed order once; after each
// backward pass the gradients are averaged over all ranks and the wrapped
// optimizer applies them, so every rank keeps identical parameters.
//
// Data flow of one step
//   1. The user marks gradients ready (grad_ready(i)) as backprop finishes
//      them; gradients never marked are marked by synchronize().
//   2. Gradients are fused into buckets of consecutive registered tensors up
//      to fusion_threshold_bytes (fusion_bucket.h). A bucket whose gradients
//      are all ready is handed to the background communication thread.
//   3. That thread takes buckets in a fixed order (the last bucket first, as
//      backprop fills them), packs each into its fusion buffer (converting to
//      float16 with Compression::kFp16) and allreduces it (average) in
//      segments of segment_bytes, packing the next segment and unpacking
//      finished ones while a segment is on the wire. A bucket whose float32
//      gradients lie back to back in memory is reduced in place, without
//      packing, as one allreduce, and so is a large gradient in the caller's
//      own buffer (in_place_min_bytes), in a bucket of its own; the small
//      ones around it still share a packed bucket. Best: let
//      the optimizer own the gradients
//      (add_parameter with a null gradient, then gradient(i); nn::Model
//      parameters can borrow them) or allocate them in one array.
//   4. synchronize() waits for every bucket and rethrows the first error;
//      step() = synchronize() + the wrapped optimizer's step.
//
// No negotiation: before the first bucket, the ranks allgather a summary of
// their registration (tensor count, sizes hash, threshold, compression) and
// every rank throws MismatchError naming the first rank that differs and how
// (count, or the first differing size) instead of deadlocking.
//
// Failures: a dead or stalled peer makes the Communicator throw CommError /
// TimeoutError (naming the rank) on the background thread; synchronize(),
// step() and every later call rethrow it with the bucket and step added. The
// destructor never blocks longer than the communicator's timeout plus a few
// seconds, even with a collective stuck.
//
// Timeline: with timeline_path (or $MUSTER_TIMELINE / $HOROVOD_TIMELINE) set, rank 0 writes a
// Chrome-trace JSON of each bucket's phases (queued, pack, allreduce,
// unpack), one row per bucket; open it in chrome://tracing or Perfetto.
//
// Threads: all methods are called by one user thread. The communication
// thread is private; the gradient buffers belong to the user and must not be
// written between grad_ready(i) and the end of synchronize(). Issue your own
// collectives on the same Communicator only while no step is in flight
// (before the first grad_ready() of a step or after synchronize()/step()
// returned), or they would interleave with the bucket allreduces in an order
// that differs between ranks (metric_average() and the broadcasts finish a
// step in flight first). Several optimizers on one Communicator (a GAN's
// two) share one communication thread; finish one's step before starting
// another's: a call on B while A has a step in flight throws InvalidArgument.
//
// Usage (Horovod's five steps):
//   namespace rt = muster::runtime;
//   // 1. Initialise: one communicator per process (size 1 without mpirun).
//   auto comm = rt::comm::Communicator::create();
//   // 2. (GPU pinning by comm->local_rank(): not needed on CPU.)
//   // 3. Scale the learning rate by the number of ranks.
//   rt::optim::AdamOptions adam_options;
//   adam_options.learning_rate = 1e-3f * comm->size();
//   auto adam = rt::optim::make_adam(adam_options);
//   // 4. Wrap the optimizer; register parameters in the same order on every rank.
//   rt::distributed::DistributedOptions o;
//   o.compression = rt::distributed::Compression::kFp16;   // optional
//   rt::distributed::DistributedOptimizer opt(*comm, std::move(adam), o);
//   for (auto& layer : model.layers)
//     opt.add_parameter(layer.name, layer.w.data(), layer.dw.data(), layer.w.size());
//   // 5. Start every rank from rank 0's parameters (and optimizer state).
//   opt.broadcast_parameters(0);
//   opt.broadcast_optimizer_state(0);
//   for (int step = 0; step < steps; ++step) {
//     float loss = model.forward_backward(batch_of_this_rank, [&](int i) { opt.grad_ready(i); });
//     opt.step();                                  // averaged gradients applied
//     double avg = opt.metric_average(loss);       // same value on every rank
//     if (comm->rank() == 0) log(step, avg);
//   }
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "runtime/comm/communicator.h"
#include "runtime/distributed/collectives.h"
#include "runtime/optim/optimizer.h"

namespace muster::runtime::distributed {

// Wire format of the gradient allreduce (Horovod's hvd.Compression).
enum class Compression { kNone, kFp16 };

const char* compression_name(Compression c);

inline constexpr std::size_t kDefaultFusionThresholdBytes = 64u << 20;
inline constexpr std::size_t kAutoInPlaceMinBytes = static_cast<std::size_t>(-1);

// DistributedOptions::in_place_min_bytes when it is kAutoInPlaceMinBytes: a
// world of `ranks` that all share one host's memory (`one_host`) on a host of
// `host_cpus` CPUs. There, with 2 ranks or more ranks than CPUs, a private
// allreduce runs as the small path's rounds (flat up to 64 KB with 2 ranks,
// 256 KB pieces above), each as cheap as the copy into a fusion buffer and
// back that fusing would cost: the ResNet-50 set with the gradients in the
// caller's buffers took 7.9-8.1 ms in place from 64 KB against 8.8-9.2 from
// 1 MB (2 ranks; 10.2-10.8 against 10.5-11.1 where traffic between the VM's
// cores is dear), and 25.4-25.8 against 34.4-35.3 ms on 4 ranks and 2 CPUs.
// Elsewhere (the ring, or TCP between hosts, where every op pays a latency)
// 1 MB, as measured for the ring.
std::size_t auto_in_place_min_bytes(int ranks, bool one_host, long host_cpus);

struct DistributedOptions {
  // Bytes of float32 gradients fused into one allreduce. 0: the environment
  // variable MUSTER_FUSION_THRESHOLD_MB, else Horovod's
  // HOROVOD_FUSION_THRESHOLD (bytes; 0 = no fusion), else 64 MB. 1 puts
  // every tensor in a bucket of its own. (HOROVOD_CYCLE_TIME has no
  // equivalent: a bucket goes as soon as its last gradient is ready.)
  std::size_t fusion_threshold_bytes = 0;
  Compression compression = Compression::kNone;
  // Chrome-trace output written by rank 0. Empty: $MUSTER_TIMELINE, else
  // $HOROVOD_TIMELINE, else none.
  std::string timeline_path;
  // Algorithm for the bucket allreduces (kAuto: by size, see communicator.h).
  comm::Algorithm algorithm = comm::Algorithm::kAuto;
  // Buckets are reduced last-first (backprop order, true) or first-first.
  bool reverse_bucket_order = true;
  // A bucket that needs packing goes on the wire in allreduces of at most
  // this many bytes of gradients, so packing and unpacking overlap the
  // transfer and each segment stays in cache (0: one allreduce per bucket).
  // 1 MB was fastest for the ResNet-50 set on a 2-rank shared-memory ring
  // (bench/allreduce). In-place buckets always go whole.
  // Must be equal on every rank.
  std::size_t segment_bytes = 1u << 20;
  // A gradient in the caller's own buffer (not one the optimizer owns) of at
  // least this many bytes gets a bucket of its own and is reduced in place,
  // skipping the copy into a fusion buffer and back that fusion costs; the
  // small ones on either side of it are still fused into one bucket (the run
  // goes on past it, its bytes counting towards the fusion threshold, so
  // the bucket waits no longer for backprop). Without compression only (fp16
  // must convert anyway). 0: fuse everything. Must be equal on every rank.
  // kAutoInPlaceMinBytes (the default): 64 KB where the whole world shares
  // one host and its private allreduces take the small path's rounds (2
  // ranks, or more ranks than CPUs), 1 MB elsewhere (auto_in_place_min_bytes).
  std::size_t in_place_min_bytes = kAutoInPlaceMinBytes;
};

class DistributedOptimizer {
 public:
  // `comm` must outlive this object.
  DistributedOptimizer(comm::Communicator& comm, std::unique_ptr<optim::Optimizer> optimizer,
                       const DistributedOptions& options = {});
  // For tests: any Collectives implementation (collectives.h).
  DistributedOptimizer(std::unique_ptr<Collectives> collectives, std::unique_ptr<optim::Optimizer> optimizer,
                       const DistributedOptions& options = {});
  ~DistributedOptimizer();
  DistributedOptimizer(const DistributedOptimizer&) = delete;
  DistributedOptimizer& operator=(const DistributedOptimizer&) = delete;

  // Registers one parameter and its gradient (both `size` floats, owned by
  // the caller). Returns its index for grad_ready(). Only before the first
  // gradient()/grad_ready()/synchronize()/step()/broadcast.
  // grad == nullptr: the optimizer owns the gradient, in one array with the
  // other owned gradients, so buckets reduce it in place with no copy
  // (PyTorch DDP's gradient_as_bucket_view); get it with gradient().
  int add_parameter(const std::string& name, float* value, float* grad, std::size_t size);

  // The gradient buffer of parameter `index` (the caller's, or the one the
  // optimizer allocated). The first call closes registration.
  float* gradient(int index);

  // Hands over the memory of the gradients the optimizer owns (null if
  // none), so that views of it outlive the optimizer: a framework's .grad
  // tensors across a world that closes and forms again keep their values
  // with no copy. Afterwards the optimizer may only be destroyed.
  std::unique_ptr<comm::SharedBuffer> release_gradient_memory();

  // Gradient `index` holds this rank's local gradient for the current step.
  // Its bucket is reduced in the background once all its gradients are ready.
  // Throws the error of a bucket of this step that already failed (CommError:
  // a peer died), as synchronize() would, without waiting for the step's end.
  void grad_ready(int index);

  // Waits until every gradient holds the average over all ranks (marking any
  // not yet marked ready). Throws MismatchError, CommError, TimeoutError.
  void synchronize();

  // synchronize(), then one step of the wrapped optimizer.
  void step();

  // Copies root's registered parameter values to every rank.
  void broadcast_parameters(int root = 0);
  // Initialises the optimizer's state if needed and copies root's state
  // buffers and iteration count to every rank.
  void broadcast_optimizer_state(int root = 0);

  // The average of `value` over all ranks (losses, accuracies).
  double metric_average(double value);
  float metric_average(float value);

  int rank() const;
  int size() const;
  optim::Optimizer& optimizer() { return *optimizer_; }
  // Number of fusion buckets (valid after the first step started).
  std::size_t bucket_count() const;
  // True when the gradients the optimizer owns live in memory the other
  // ranks map (Communicator::allocate_shared: the whole job on one host), so
  // their buckets run the direct allreduce. Valid after the first step started.
  bool gradients_direct() const;
  // Fusion threshold and compression in force (after environment defaults).
  const DistributedOptions& options() const { return options_; }

  struct Impl;

 private:
  DistributedOptions options_;
  std::unique_ptr<optim::Optimizer> optimizer_;
  std::unique_ptr<Impl> impl_;
};

// Copies root's buffers to every rank, fused into few broadcasts (for
// parameters not registered with a DistributedOptimizer).
void broadcast_parameters(comm::Communicator& comm, const std::vector<optim::ParamRef>& params, int root);

}  // namespace muster::runtime::distributed
