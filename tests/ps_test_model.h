// Shared by the ps_*_test.cc files: a linear model y = W x + b with a mean
// squared error, deterministic data per (step, sample), in-process PS tasks
// on 127.0.0.1 and a single-process reference trainer.
#pragma once

#include <cmath>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "runtime/optim/optimizer.h"
#include "runtime/ps/client.h"
#include "runtime/ps/server.h"

namespace muster::runtime::ps::testing {

constexpr int kIn = 64, kOut = 40;  // W: 2560 floats, b: 40

struct Model {
  std::vector<float> w, b;
  Model() : w(kIn * kOut), b(kOut) {
    std::mt19937 rng(7);
    std::normal_distribution<float> d(0.0f, 0.1f);
    for (auto& v : w) v = d(rng);
    for (auto& v : b) v = d(rng);
  }
};

// One sample: x and the target y of a fixed "true" linear map plus noise.
inline void sample(int64_t step, int index, std::vector<float>* x, std::vector<float>* y) {
  std::mt19937 rng(static_cast<uint32_t>(step * 7919 + index * 104729 + 1));
  std::normal_distribution<float> d(0.0f, 1.0f);
  x->resize(kIn);
  y->assign(kOut, 0.0f);
  for (auto& v : *x) v = d(rng);
  for (int o = 0; o < kOut; ++o) {
    for (int i = 0; i < kIn; ++i) (*y)[o] += std::sin(0.1f * (o * kIn + i)) * (*x)[i];
    (*y)[o] += 0.01f * d(rng);
  }
}

// Mean-squared-error gradients over samples [first, first + count) of `step`.
inline void gradients(const Model& m, int64_t step, int first, int count, std::vector<float>* dw, std::vector<float>* db) {
  dw->assign(m.w.size(), 0.0f);
  db->assign(m.b.size(), 0.0f);
  std::vector<float> x, y;
  for (int s = first; s < first + count; ++s) {
    sample(step, s, &x, &y);
    for (int o = 0; o < kOut; ++o) {
      float pred = m.b[o];
      for (int i = 0; i < kIn; ++i) pred += m.w[o * kIn + i] * x[i];
      const float err = (pred - y[o]) / static_cast<float>(count);
      (*db)[o] += err;
      for (int i = 0; i < kIn; ++i) (*dw)[o * kIn + i] += err * x[i];
    }
  }
}

inline float loss(const Model& m, int64_t step, int count) {
  std::vector<float> x, y;
  double total = 0;
  for (int s = 0; s < count; ++s) {
    sample(step, s, &x, &y);
    for (int o = 0; o < kOut; ++o) {
      float pred = m.b[o];
      for (int i = 0; i < kIn; ++i) pred += m.w[o * kIn + i] * x[i];
      total += 0.5 * (pred - y[o]) * (pred - y[o]);
    }
  }
  return static_cast<float>(total / count);
}

// One process training on the concatenated batch of every step.
inline Model reference(const std::string& optimizer, float lr, int64_t steps, int batch_total, int64_t first_step = 0) {
  Model m;
  auto opt = optim::make_optimizer(optimizer, lr);
  std::vector<float> dw, db;
  for (int64_t s = first_step; s < steps; ++s) {
    gradients(m, s, 0, batch_total, &dw, &db);
    opt->step({{m.w.data(), dw.data(), m.w.size()}, {m.b.data(), db.data(), m.b.size()}});
  }
  return m;
}

inline float max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  float d = a.size() == b.size() ? 0.0f : INFINITY;
  for (std::size_t i = 0; i < a.size() && i < b.size(); ++i) d = std::max(d, std::fabs(a[i] - b[i]));
  return d;
}

// In-process PS tasks on ephemeral ports of 127.0.0.1.
struct LocalPs {
  std::vector<std::unique_ptr<PsServer>> servers;
  LocalPs(int n, int timeout_ms = 20000, uint64_t max_frame = uint64_t{1} << 30) {
    for (int i = 0; i < n; ++i) {
      ServerOptions o;
      o.host = "127.0.0.1";
      o.task_index = i;
      o.timeout_ms = timeout_ms;
      o.max_frame_bytes = max_frame;
      servers.push_back(std::make_unique<PsServer>(o));
      servers.back()->start();
    }
  }
  std::vector<std::string> addresses() const {
    std::vector<std::string> a;
    for (const auto& s : servers) a.push_back("127.0.0.1:" + std::to_string(s->port()));
    return a;
  }
  PsCluster cluster(int n_workers, int worker_index) const {
    PsCluster c;
    c.ps = addresses();
    for (int i = 0; i < n_workers; ++i) c.workers.push_back("127.0.0.1:" + std::to_string(1 + i));
    c.task_type = "worker";
    c.task_index = worker_index;
    return c;
  }
  ServerStats total() const {
    ServerStats t;
    for (const auto& s : servers) {
      auto x = s->stats();
      t.pushes_accepted += x.pushes_accepted;
      t.stale_dropped += x.stale_dropped;
      t.steps_applied += x.steps_applied;
      t.bad_frames += x.bad_frames;
    }
    return t;
  }
};

// Small slices so that even this model is cut up and spread over the PS tasks.
inline ClientOptions small_slices(ClientOptions o) {
  o.placement.max_slice_bytes = 2048;
  o.placement.min_slice_bytes = 1024;
  return o;
}

}  // namespace muster::runtime::ps::testing
