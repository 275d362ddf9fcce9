// Optimizers against the textbook update computed independently in double.
#include <cmath>
#include <vector>

#include <gtest/gtest.h>

#include "runtime/error.h"
#include "runtime/optim/optimizer.h"

namespace muster::runtime::optim {
namespace {

TEST(Sgd, PlainStepIsLrTimesGradient) {
  auto opt = make_sgd({0.5f, 0.0f, false, 0.0f});
  std::vector<float> w{1.0f, -2.0f, 3.0f}, g{0.2f, 0.4f, -1.0f};
  opt->step({{w.data(), g.data(), w.size()}});
  EXPECT_FLOAT_EQ(w[0], 0.9f);
  EXPECT_FLOAT_EQ(w[1], -2.2f);
  EXPECT_FLOAT_EQ(w[2], 3.5f);
  EXPECT_EQ(opt->iterations(), 1);
}

TEST(Sgd, MomentumAccumulatesVelocity) {
  const float lr = 0.1f, mu = 0.9f;
  auto opt = make_sgd({lr, mu, false, 0.0f});
  std::vector<float> w{1.0f}, g{1.0f};
  double ref_w = 1.0, ref_v = 0.0;
  for (int t = 0; t < 5; ++t) {
    opt->step({{w.data(), g.data(), 1}});
    ref_v = mu * ref_v + 1.0;
    ref_w -= lr * ref_v;
    EXPECT_NEAR(w[0], ref_w, 1e-6);
  }
  auto st = opt->state();
  ASSERT_EQ(st.size(), 1u);
  EXPECT_NEAR(st[0].data[0], ref_v, 1e-6);
}

TEST(Sgd, RejectsChangedParameterCount) {
  auto opt = make_sgd({0.1f, 0.9f, false, 0.0f});
  std::vector<float> w(4, 1.0f), g(4, 1.0f);
  opt->step({{w.data(), g.data(), 4}});
  EXPECT_THROW(opt->step({{w.data(), g.data(), 2}, {w.data(), g.data(), 2}}), Error);
}

TEST(Adam, MatchesReferenceInDouble) {
  AdamOptions o;
  o.learning_rate = 0.01f;
  auto opt = make_adam(o);
  std::vector<float> w{0.5f, -0.25f};
  double rw[2] = {0.5, -0.25}, m[2] = {0, 0}, v[2] = {0, 0};
  for (int t = 1; t <= 10; ++t) {
    std::vector<float> g{static_cast<float>(0.1 * t), static_cast<float>(-0.3 + 0.05 * t)};
    opt->step({{w.data(), g.data(), 2}});
    for (int i = 0; i < 2; ++i) {
      m[i] = 0.9 * m[i] + 0.1 * g[i];
      v[i] = 0.999 * v[i] + 0.001 * g[i] * g[i];
      const double mh = m[i] / (1 - std::pow(0.9, t)), vh = v[i] / (1 - std::pow(0.999, t));
      rw[i] -= 0.01 * mh / (std::sqrt(vh) + 1e-8);
      EXPECT_NEAR(w[i], rw[i], 1e-5) << "step " << t << " element " << i;
    }
  }
  EXPECT_EQ(opt->state().size(), 2u);  // m and v of the one parameter
}

TEST(MakeOptimizer, UnknownNameIsAClearError) {
  try {
    make_optimizer("rmsprop", 0.1f);
    FAIL() << "expected an error";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("rmsprop"), std::string::npos);
  }
}

}  // namespace
}  // namespace muster::runtime::optim
