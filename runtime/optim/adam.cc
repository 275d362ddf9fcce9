// Adam (Kingma & Ba), with bias correction folded into the step size:
//   g' = g + wd * w
//   m  = b1 * m + (1 - b1) * g'
//   v  = b2 * v + (1 - b2) * g'^2
//   w -= lr * sqrt(1 - b2^t) / (1 - b1^t) * m / (sqrt(v) + eps * sqrt(1 - b2^t))
// which equals the textbook m_hat / (sqrt(v_hat) + eps) form.
#include <cmath>

#include <Eigen/Core>

#include "runtime/error.h"
#include "runtime/optim/optimizer.h"

namespace muster::runtime::optim {
namespace {

using Vec = Eigen::Map<Eigen::ArrayXf>;
using ConstVec = Eigen::Map<const Eigen::ArrayXf>;

class Adam final : public Optimizer {
 public:
  explicit Adam(const AdamOptions& o) : Optimizer(o.learning_rate), options_(o) {
    if (!(o.beta1 >= 0.0f && o.beta1 < 1.0f) || !(o.beta2 >= 0.0f && o.beta2 < 1.0f)) {
      throw InvalidArgument("adam: beta1 and beta2 must be in [0, 1)");
    }
    if (!(o.epsilon > 0.0f)) throw InvalidArgument("adam: epsilon must be > 0");
  }

  std::string name() const override { return "adam"; }

  void init(const std::vector<std::size_t>& sizes) override {
    m_.clear();
    v_.clear();
    for (std::size_t n : sizes) {
      m_.emplace_back(Eigen::ArrayXf::Zero(static_cast<Eigen::Index>(n)));
      v_.emplace_back(Eigen::ArrayXf::Zero(static_cast<Eigen::Index>(n)));
    }
    initialised_ = true;
  }

  void step(const std::vector<ParamRef>& params) override {
    if (!initialised_) {
      std::vector<std::size_t> sizes;
      for (const auto& p : params) sizes.push_back(p.size);
      init(sizes);
    }
    MUSTER_CHECK_EQ(params.size(), m_.size(), "adam: parameter count changed between steps");
    const double t = static_cast<double>(iterations_ + 1);
    const float b1 = options_.beta1, b2 = options_.beta2, wd = options_.weight_decay;
    const double c1 = 1.0 - std::pow(static_cast<double>(b1), t);
    const double c2 = std::sqrt(1.0 - std::pow(static_cast<double>(b2), t));
    const float step_size = static_cast<float>(learning_rate_ * c2 / c1);
    const float eps_hat = static_cast<float>(options_.epsilon * c2);
    for (std::size_t i = 0; i < params.size(); ++i) {
      const auto& p = params[i];
      MUSTER_CHECK_EQ(p.size, static_cast<std::size_t>(m_[i].size()), "adam: size of parameter " << i << " changed");
      const auto n = static_cast<Eigen::Index>(p.size);
      Vec w(p.value, n);
      ConstVec g0(p.grad, n);
      auto& m = m_[i];
      auto& v = v_[i];
      if (wd == 0.0f) {
        m = b1 * m + (1.0f - b1) * g0;
        v = b2 * v + (1.0f - b2) * g0.square();
      } else {
        const Eigen::ArrayXf g = g0 + wd * w;
        m = b1 * m + (1.0f - b1) * g;
        v = b2 * v + (1.0f - b2) * g.square();
      }
      w -= step_size * m / (v.sqrt() + eps_hat);
    }
    ++iterations_;
  }

  std::vector<StateRef> state() override {
    std::vector<StateRef> out;
    for (std::size_t i = 0; i < m_.size(); ++i) {
      out.push_back({"adam_m/" + std::to_string(i), m_[i].data(), static_cast<std::size_t>(m_[i].size())});
      out.push_back({"adam_v/" + std::to_string(i), v_[i].data(), static_cast<std::size_t>(v_[i].size())});
    }
    return out;
  }

 private:
  AdamOptions options_;
  bool initialised_ = false;
  std::vector<Eigen::ArrayXf> m_, v_;
};

}  // namespace

std::unique_ptr<Optimizer> make_adam(const AdamOptions& options) { return std::make_unique<Adam>(options); }

}  // namespace muster::runtime::optim
