// Parameter-server mode (TF_CONFIG): TensorFlow's SyncReplicasOptimizer
// semantics through muster's SyncReplicasClient. The optimizer runs on the
// parameter servers at the scaled rate (base x workers); the warm-up scales
// the pushed gradients instead, which for SGD and momentum is the same ramp.
// The chief initialises the variables (or the client resumes them from the
// newest checkpoint in --checkpoint-dir) and checkpoints every epoch. All
// workers end with the same parameters, so each evaluates the whole test set.
#include <Eigen/Core>
#include <cstdio>
#include <vector>

#include "examples/fashion_mnist/mode.h"
#include "runtime/error.h"
#include "runtime/ps/client.h"

namespace muster::examples::fashion_mnist {
namespace {

namespace rt = muster::runtime;

class PsMode final : public Mode {
 public:
  explicit PsMode(const TrainOptions& o) : options_(o), cluster_(rt::ps::PsCluster::from_env()) {}

  std::string name() const override { return "ps"; }
  int rank() const override { return cluster_.worker_index(); }
  int size() const override { return cluster_.num_workers(); }

  int64_t start(rt::nn::Model& model, int64_t steps_per_epoch) override {
    if (cluster_.task_type == "ps") {
      throw rt::InvalidArgument("TF_CONFIG says this task is a ps task: run muster-ps there, not fashion_mnist");
    }
    rt::ps::ClientOptions c;
    c.optimizer = options_.optimizer;
    base_lr_ = options_.lr > 0 ? options_.lr : default_lr(options_.optimizer);
    c.learning_rate = base_lr_ * static_cast<float>(size());
    c.checkpoint_dir = options_.checkpoint_dir;
    c.checkpoint_every = static_cast<int>(steps_per_epoch);
    client_ = std::make_unique<rt::ps::SyncReplicasClient>(cluster_, c);
    std::vector<rt::ps::Variable> vars;
    for (auto& p : model.parameters()) {
      vars.push_back({p.name, p.value.data(), p.size()});
      grads_.push_back(p.grad.data());
    }
    client_->register_variables(std::move(vars));
    const int64_t step = client_->initialize_or_wait();
    if (step > 0 && is_chief()) std::printf("resumed at global step %lld\n", static_cast<long long>(step));
    return step;
  }

  void apply(rt::nn::Model& model, int64_t, float lr) override {
    const float scale = lr / (base_lr_ * static_cast<float>(size()));
    if (scale != 1.0f) {
      for (auto& p : model.parameters()) {
        Eigen::Map<Eigen::ArrayXf>(p.grad.data(), static_cast<Eigen::Index>(p.size())) *= scale;
      }
    }
    client_->step(grads_);
  }

  void end_epoch(rt::nn::Model&, int64_t) override {}  // the client checkpoints every epoch
  double sum(double value) override { return value; }
  bool shares_evaluation() const override { return false; }
  void finish(rt::nn::Model&) override { client_->done(); }

 private:
  TrainOptions options_;
  rt::ps::PsCluster cluster_;
  float base_lr_ = 0.0f;
  std::unique_ptr<rt::ps::SyncReplicasClient> client_;
  std::vector<const float*> grads_;
};

}  // namespace

std::unique_ptr<Mode> make_ps_mode(const TrainOptions& options) { return std::make_unique<PsMode>(options); }

}  // namespace muster::examples::fashion_mnist
