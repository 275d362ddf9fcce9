// Allreduce mode (under mpirun): Horovod's recipe with muster's runtime.
// One Communicator per process, a DistributedOptimizer that averages the
// gradients over all ranks before each step, parameters and optimizer state
// broadcast from rank 0 (which restores the checkpoint, if any, first), rank
// 0 checkpoints. Metrics are summed with an allreduce.
#include <cstdio>

#include "examples/fashion_mnist/checkpoint.h"
#include "examples/fashion_mnist/mode.h"
#include "runtime/comm/communicator.h"
#include "runtime/distributed/distributed_optimizer.h"
#include "runtime/error.h"

namespace muster::examples::fashion_mnist {
namespace {

namespace rt = muster::runtime;

class AllreduceMode final : public Mode {
 public:
  explicit AllreduceMode(const TrainOptions& o) : options_(o), comm_(rt::comm::Communicator::create()) {
    rt::distributed::DistributedOptions d;
    if (o.compression == "fp16") {
      d.compression = rt::distributed::Compression::kFp16;
    } else if (o.compression != "none") {
      throw rt::InvalidArgument("--compression must be none or fp16, got '" + o.compression + "'");
    }
    optimizer_ = std::make_unique<rt::distributed::DistributedOptimizer>(
        *comm_, rt::optim::make_optimizer(o.optimizer, o.lr > 0 ? o.lr : default_lr(o.optimizer)), d);
  }

  std::string name() const override { return "allreduce"; }
  int rank() const override { return comm_->rank(); }
  int size() const override { return comm_->size(); }

  int64_t start(rt::nn::Model& model, int64_t) override {
    // The optimizer owns the gradients (back to back, reduced in place) and
    // lends them to the model, so backprop writes straight into the fusion
    // buckets: no packing or unpacking each step.
    auto& params = model.parameters();
    for (auto& p : params) optimizer_->add_parameter(p.name, p.value.data(), nullptr, p.size());
    for (std::size_t i = 0; i < params.size(); ++i) params[i].grad.borrow(optimizer_->gradient(static_cast<int>(i)));
    int64_t steps = 0;
    if (rank() == 0 && !options_.checkpoint_dir.empty()) {
      if (auto s = load_checkpoint(options_.checkpoint_dir, model, optimizer_->optimizer())) {
        steps = *s;
        std::printf("resumed from %s at step %lld\n", checkpoint_path(options_.checkpoint_dir).c_str(),
                    static_cast<long long>(steps));
      }
    }
    comm_->broadcast(&steps, 1, rt::DataType::kInt64, 0);
    optimizer_->broadcast_parameters(0);
    optimizer_->broadcast_optimizer_state(0);
    return steps;
  }

  void apply(rt::nn::Model&, int64_t, float lr) override {
    optimizer_->optimizer().set_learning_rate(lr);
    optimizer_->step();  // averages the gradients of all ranks, then updates
  }

  void end_epoch(rt::nn::Model& model, int64_t step) override {
    if (rank() == 0 && !options_.checkpoint_dir.empty()) {
      save_checkpoint(options_.checkpoint_dir, step, model, optimizer_->optimizer());
    }
  }

  double sum(double value) override {
    comm_->allreduce(&value, 1, rt::DataType::kFloat64, {rt::comm::ReduceOp::kSum});
    return value;
  }
  bool shares_evaluation() const override { return true; }
  void finish(rt::nn::Model&) override { comm_->barrier(); }

 private:
  TrainOptions options_;
  std::unique_ptr<rt::comm::Communicator> comm_;
  std::unique_ptr<rt::distributed::DistributedOptimizer> optimizer_;
};

}  // namespace

std::unique_ptr<Mode> make_allreduce_mode(const TrainOptions& options) {
  return std::make_unique<AllreduceMode>(options);
}

}  // namespace muster::examples::fashion_mnist
