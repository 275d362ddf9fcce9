// SGD with optional (Nesterov) momentum, as PyTorch defines it:
//   g' = g + wd * w
//   v  = mu * v + g'
//   w -= lr * (nesterov ? g' + mu * v : v)        (mu == 0: w -= lr * g')
#include <Eigen/Core>

#include "runtime/error.h"
#include "runtime/optim/optimizer.h"

namespace muster::runtime::optim {
namespace {

using Vec = Eigen::Map<Eigen::ArrayXf>;
using ConstVec = Eigen::Map<const Eigen::ArrayXf>;

class Sgd final : public Optimizer {
 public:
  explicit Sgd(const SgdOptions& o) : Optimizer(o.learning_rate), options_(o) {
    if (o.momentum < 0.0f || o.momentum >= 1.0f) {
      throw InvalidArgument("sgd: momentum must be in [0, 1), got " + std::to_string(o.momentum));
    }
  }

  std::string name() const override { return "sgd"; }

  void init(const std::vector<std::size_t>& sizes) override {
    velocity_.clear();
    if (options_.momentum == 0.0f) {
      sizes_ = sizes;
      return;
    }
    for (std::size_t n : sizes) velocity_.emplace_back(Eigen::ArrayXf::Zero(static_cast<Eigen::Index>(n)));
    sizes_ = sizes;
  }

  void step(const std::vector<ParamRef>& params) override {
    if (sizes_.empty() && !params.empty()) {
      std::vector<std::size_t> sizes;
      for (const auto& p : params) sizes.push_back(p.size);
      init(sizes);
    }
    MUSTER_CHECK_EQ(params.size(), sizes_.size(), "sgd: parameter count changed between steps");
    const float lr = learning_rate_, mu = options_.momentum, wd = options_.weight_decay;
    for (std::size_t i = 0; i < params.size(); ++i) {
      const auto& p = params[i];
      MUSTER_CHECK_EQ(p.size, sizes_[i], "sgd: size of parameter " << i << " changed");
      const auto n = static_cast<Eigen::Index>(p.size);
      Vec w(p.value, n);
      ConstVec g0(p.grad, n);
      if (mu == 0.0f) {
        if (wd == 0.0f) w -= lr * g0;
        else w -= lr * (g0 + wd * w);
        continue;
      }
      auto& v = velocity_[i];
      if (wd == 0.0f) v = mu * v + g0;
      else v = mu * v + g0 + wd * w;
      if (options_.nesterov) {
        if (wd == 0.0f) w -= lr * (g0 + mu * v);
        else w -= lr * (g0 + wd * w + mu * v);
      } else {
        w -= lr * v;
      }
    }
    ++iterations_;
  }

  std::vector<StateRef> state() override {
    std::vector<StateRef> out;
    for (std::size_t i = 0; i < velocity_.size(); ++i) {
      out.push_back({"momentum/" + std::to_string(i), velocity_[i].data(),
                     static_cast<std::size_t>(velocity_[i].size())});
    }
    return out;
  }

 private:
  SgdOptions options_;
  std::vector<std::size_t> sizes_;
  std::vector<Eigen::ArrayXf> velocity_;
};

}  // namespace

std::unique_ptr<Optimizer> make_sgd(const SgdOptions& options) { return std::make_unique<Sgd>(options); }

std::unique_ptr<Optimizer> make_optimizer(const std::string& name, float learning_rate) {
  if (name == "sgd") return make_sgd({learning_rate, 0.0f, false, 0.0f});
  if (name == "momentum") return make_sgd({learning_rate, 0.9f, false, 0.0f});
  if (name == "adam") {
    AdamOptions o;
    o.learning_rate = learning_rate;
    return make_adam(o);
  }
  throw InvalidArgument("unknown optimizer '" + name + "': expected sgd, momentum or adam");
}

}  // namespace muster::runtime::optim
