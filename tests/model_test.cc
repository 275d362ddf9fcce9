// Models: shapes, gradient checks of every parameter tensor against central
// finite differences, and a few optimisation steps lowering the loss.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "runtime/error.h"
#include "runtime/nn/model.h"

namespace muster::runtime::nn {
namespace {

struct Batch {
  std::vector<float> images;
  std::vector<int32_t> labels;
};

Batch random_batch(int n, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  Batch b;
  b.images.resize(static_cast<std::size_t>(n) * 784);
  for (float& v : b.images) v = u(rng);
  for (int i = 0; i < n; ++i) b.labels.push_back(static_cast<int32_t>(rng() % 10));
  return b;
}

class ModelTest : public ::testing::TestWithParam<std::string> {};

TEST_P(ModelTest, ShapesAndNames) {
  auto m = make_model(GetParam());
  EXPECT_EQ(m->name(), GetParam());
  std::size_t total = 0;
  for (const auto& p : m->parameters()) {
    EXPECT_FALSE(p.name.empty());
    EXPECT_EQ(p.grad.size(), p.value.size());
    total += p.size();
  }
  EXPECT_EQ(total, m->parameter_count());
  if (GetParam() == "mlp") {
    EXPECT_EQ(total, 784u * 256 + 256 + 256 * 128 + 128 + 128 * 10 + 10);
  }
  Batch b = random_batch(3, 1);
  std::vector<float> logits(30);
  m->initialize(1);
  m->forward(b.images.data(), 3, logits.data());
  for (float v : logits) EXPECT_TRUE(std::isfinite(v));
}

TEST_P(ModelTest, SameSeedSameParameters) {
  auto a = make_model(GetParam()), b = make_model(GetParam()), c = make_model(GetParam());
  a->initialize(9), b->initialize(9), c->initialize(10);
  for (std::size_t i = 0; i < a->parameters().size(); ++i) {
    EXPECT_EQ(a->parameters()[i].value, b->parameters()[i].value);
    if (a->parameters()[i].fan_in) {
      EXPECT_NE(a->parameters()[i].value, c->parameters()[i].value);
    }
  }
}

// Every parameter tensor: 12 entries (the largest gradient, then random ones)
// against the central difference (L(w+h) - L(w-h)) / 2h. The loss is float32,
// so h cannot be tiny, and the loss is only piecewise smooth: a perturbed
// conv weight moves hundreds of ReLU/max-pool inputs, and in a channel whose
// pre-activations sit near zero some cross their kink even at h = 2.5e-4
// (measured: about 5% of conv2's entries). So an entry passes when either of
// two step sizes agrees within 2% + 5e-4, and at least 90% of the entries of
// each tensor must pass; a wrong formula (transpose, missing mask, wrong
// scale) fails nearly all of them. layers_test checks each layer exactly.
TEST_P(ModelTest, GradientsMatchFiniteDifferences) {
  auto m = make_model(GetParam());
  m->initialize(3);
  const int n = 4;
  Batch b = random_batch(n, 2);
  m->forward_backward(b.images.data(), b.labels.data(), n);
  std::vector<std::vector<float>> grads;
  for (const auto& p : m->parameters()) grads.emplace_back(p.grad.begin(), p.grad.end());

  auto numeric = [&](Parameter& p, std::size_t i, float h) {
    const float saved = p.value[i];
    p.value[i] = saved + h;
    const double up = m->forward_backward(b.images.data(), b.labels.data(), n);
    p.value[i] = saved - h;
    const double down = m->forward_backward(b.images.data(), b.labels.data(), n);
    p.value[i] = saved;
    return (up - down) / (2.0 * double(h));
  };

  std::mt19937 rng(5);
  int checked = 0;
  for (std::size_t t = 0; t < m->parameters().size(); ++t) {
    auto& p = m->parameters()[t];
    std::vector<std::size_t> picks;
    std::size_t argmax = 0;
    for (std::size_t i = 0; i < p.size(); ++i)
      if (std::abs(grads[t][i]) > std::abs(grads[t][argmax])) argmax = i;
    picks.push_back(argmax);
    for (int k = 0; k < 11; ++k) picks.push_back(rng() % p.size());
    int passed = 0;
    std::string misses;
    for (std::size_t i : picks) {
      const double analytic = grads[t][i];
      const double n1 = numeric(p, i, 1e-3f);
      bool ok = std::abs(n1 - analytic) <= 5e-4 + 2e-2 * std::abs(n1);
      double n2 = 0.0;
      if (!ok) {
        n2 = numeric(p, i, 2.5e-4f);
        ok = std::abs(n2 - analytic) <= 1e-3 + 2e-2 * std::abs(n2);
      }
      if (ok) {
        ++passed;
      } else {
        misses += " [" + std::to_string(i) + "] analytic " + std::to_string(analytic) + " numeric " +
                  std::to_string(n1) + " / " + std::to_string(n2) + ";";
      }
      ++checked;
    }
    EXPECT_GE(passed, 11) << p.name << ":" << misses;
    EXPECT_NE(grads[t][argmax], 0.0f) << p.name << " has an all-zero gradient";
  }
  EXPECT_EQ(checked, 12 * static_cast<int>(m->parameters().size()));
}

TEST_P(ModelTest, SgdStepsLowerTheLossOnATinyBatch) {
  auto m = make_model(GetParam());
  m->initialize(4);
  const int n = 16;
  Batch b = random_batch(n, 8);
  const float first = m->forward_backward(b.images.data(), b.labels.data(), n);
  float last = first;
  for (int step = 0; step < 30; ++step) {
    for (auto& p : m->parameters())
      for (std::size_t i = 0; i < p.size(); ++i) p.value[i] -= 0.05f * p.grad[i];
    last = m->forward_backward(b.images.data(), b.labels.data(), n);
  }
  EXPECT_LT(last, 0.5f * first) << "first " << first << " last " << last;
  EXPECT_EQ(m->count_correct(b.images.data(), b.labels.data(), n, 5), n);  // memorised
}

INSTANTIATE_TEST_SUITE_P(Models, ModelTest, ::testing::Values("mlp", "cnn"));

// A model whose gradients live in borrowed memory (a DistributedOptimizer's
// arena) computes the same gradients there as in its own buffers.
TEST_P(ModelTest, BorrowedGradientsReceiveTheSameValues) {
  auto own = make_model(GetParam()), lent = make_model(GetParam());
  own->initialize(5);
  lent->initialize(5);
  std::size_t total = 0;
  for (const auto& p : lent->parameters()) total += p.size();
  std::vector<float> arena(total, -1.0f);
  std::size_t offset = 0;
  for (auto& p : lent->parameters()) {
    std::fill(p.grad.begin(), p.grad.end(), 0.25f);
    p.grad.borrow(arena.data() + offset);
    EXPECT_TRUE(p.grad.borrowed());
    EXPECT_EQ(p.grad.data(), arena.data() + offset);
    EXPECT_EQ(arena[offset], 0.25f) << p.name << ": borrow must carry the current values over";
    offset += p.size();
  }
  const Batch b = random_batch(3, 9);
  own->forward_backward(b.images.data(), b.labels.data(), 3);
  lent->forward_backward(b.images.data(), b.labels.data(), 3);
  offset = 0;
  for (std::size_t t = 0; t < own->parameters().size(); ++t) {
    const auto& p = own->parameters()[t];
    for (std::size_t i = 0; i < p.size(); ++i) ASSERT_EQ(arena[offset + i], p.grad[i]) << p.name << "[" << i << "]";
    offset += p.size();
  }
  EXPECT_THROW(own->parameters()[0].grad.borrow(nullptr), InvalidArgument);
}

TEST(MakeModel, RejectsUnknownNames) { EXPECT_THROW(make_model("resnet"), InvalidArgument); }

}  // namespace
}  // namespace muster::runtime::nn
