// Single-process mode: a local optimizer, checkpoints in --checkpoint-dir.
#include <cstdio>

#include "examples/fashion_mnist/checkpoint.h"
#include "examples/fashion_mnist/mode.h"
#include "runtime/optim/optimizer.h"

namespace muster::examples::fashion_mnist {
namespace {

std::vector<runtime::optim::ParamRef> param_refs(runtime::nn::Model& model) {
  std::vector<runtime::optim::ParamRef> refs;
  for (auto& p : model.parameters()) refs.push_back({p.value.data(), p.grad.data(), p.size()});
  return refs;
}

class SingleMode final : public Mode {
 public:
  explicit SingleMode(const TrainOptions& o)
      : options_(o), optimizer_(runtime::optim::make_optimizer(o.optimizer, o.lr > 0 ? o.lr : default_lr(o.optimizer))) {}

  std::string name() const override { return "single"; }
  int rank() const override { return 0; }
  int size() const override { return 1; }

  int64_t start(runtime::nn::Model& model, int64_t) override {
    if (options_.checkpoint_dir.empty()) return 0;
    auto steps = load_checkpoint(options_.checkpoint_dir, model, *optimizer_);
    if (steps) std::printf("resumed from %s at step %lld\n", checkpoint_path(options_.checkpoint_dir).c_str(),
                           static_cast<long long>(*steps));
    return steps.value_or(0);
  }

  void apply(runtime::nn::Model& model, int64_t, float lr) override {
    optimizer_->set_learning_rate(lr);
    optimizer_->step(param_refs(model));
  }

  void end_epoch(runtime::nn::Model& model, int64_t step) override {
    if (!options_.checkpoint_dir.empty()) save_checkpoint(options_.checkpoint_dir, step, model, *optimizer_);
  }

  double sum(double value) override { return value; }
  bool shares_evaluation() const override { return false; }
  void finish(runtime::nn::Model&) override {}

 private:
  TrainOptions options_;
  std::unique_ptr<runtime::optim::Optimizer> optimizer_;
};

}  // namespace

std::unique_ptr<Mode> make_single_mode(const TrainOptions& options) { return std::make_unique<SingleMode>(options); }

}  // namespace muster::examples::fashion_mnist
