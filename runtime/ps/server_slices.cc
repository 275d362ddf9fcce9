// The SyncReplicas bookkeeping of a PS task: slices created by the chief's
// init (or its resume from a checkpoint), pushes aggregated per step
// (Impl::push), pulls answered or parked until their step, and state pulls
// for checkpoints.

#include <spdlog/spdlog.h>

#include "runtime/ps/server_connection.h"
#include "runtime/ps/server_impl.h"

namespace muster::runtime::ps {

Slice* PsServer::Impl::find_slice(uint32_t id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = slices_.find(id);
  return it == slices_.end() ? nullptr : it->second.get();
}

std::string PsServer::Impl::init(uint32_t id, int64_t step, uint32_t state_buffers, std::shared_ptr<std::vector<float>> values) {
  std::vector<PendingPull> ready;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (slices_.count(id)) return "";  // the first init wins
    auto s = std::make_unique<Slice>();
    s->id = id;
    s->size = values->size() / (1 + state_buffers);
    s->step = step;
    s->opt = optim::make_optimizer(options_.optimizer, options_.learning_rate);
    s->opt->init({s->size});
    s->opt->set_iterations(step);  // one optimizer update per global step
    if (state_buffers > 0) {  // resuming: the optimizer's state follows the values
      auto state = s->opt->state();
      if (state.size() != state_buffers) {
        return "init of slice " + std::to_string(id) + " carries " + std::to_string(state_buffers) + " state buffers, optimizer " +
               options_.optimizer + " has " + std::to_string(state.size());
      }
      for (std::size_t k = 0; k < state.size(); ++k) {
        std::copy_n(values->data() + (k + 1) * s->size, s->size, state[k].data);
      }
      values->resize(s->size);
    }
    s->values = std::move(values);
    for (auto it = orphan_pulls_.begin(); it != orphan_pulls_.end();) {
      if (it->slice != id) {
        ++it;
        continue;
      }
      if (it->min_step <= step) ready.push_back(std::move(*it));
      else s->pending.push_back(std::move(*it));
      it = orphan_pulls_.erase(it);
    }
    for (auto& p : ready) p.conn->send_params(id, s->step, s->values);
    slices_[id] = std::move(s);
  }
  return "";
}

// The SyncReplicas rules for one slice (sync mode):
//   a) step < global step: stale, dropped and counted (in the server's
//      stats and, for the worker, in the aux of its connection's kParams).
//   b) step > global step: impossible for a worker that pulled before
//      pushing; a protocol error (it would mix steps).
//   c) otherwise accumulate; the first gradient of a step is swapped in,
//      not copied.
//   d) at replicas_to_aggregate gradients: average, apply the optimizer,
//      advance the global step, answer the pulls waiting for it. Later
//      gradients for the old step (backup workers) fall under a).
// Async mode applies every gradient at once and advances the step.
std::string PsServer::Impl::push(Slice& s, int64_t step, std::vector<float>& grad, bool* stale) {
  std::vector<PendingPull> ready;
  std::shared_ptr<std::vector<float>> snapshot;
  int64_t new_step = 0;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    const bool async = options_.mode == Mode::kAsync;
    bool apply = async;
    if (!async) {
      if (step < s.step) {
        ++stale_dropped_;
        *stale = true;
        return "";
      }
      if (step > s.step) {
        return "push for step " + std::to_string(step) + " of slice " + std::to_string(s.id) + " ahead of its global step " +
               std::to_string(s.step) + " (a worker must pull before it pushes)";
      }
      const int r = static_cast<int>(options_.replicas_to_aggregate);
      if (s.count == 0) {
        std::swap(s.accum, grad);
        s.first_push = Clock::now();
      } else {
        float* a = s.accum.data();
        const float* g = grad.data();
        if (s.count + 1 < r) {
          for (std::size_t i = 0; i < s.size; ++i) a[i] += g[i];
        } else {  // the last one: add and average in one pass
          const float scale = 1.0f / static_cast<float>(r);
          for (std::size_t i = 0; i < s.size; ++i) a[i] = (a[i] + g[i]) * scale;
        }
      }
      ++s.count;
      apply = s.count == r;
    }
    ++pushes_accepted_;
    if (apply) {
      if (s.values.use_count() > 1) s.values = std::make_shared<std::vector<float>>(*s.values);  // a pull is sending it
      const float* g = async ? grad.data() : s.accum.data();
      s.opt->step({{s.values->data(), g, s.size}});
      ++s.step;
      s.count = 0;
      ++steps_applied_;
      new_step = s.step;
      snapshot = s.values;
      for (auto it = s.pending.begin(); it != s.pending.end();) {
        if (it->min_step <= s.step) {
          ready.push_back(std::move(*it));
          it = s.pending.erase(it);
        } else {
          ++it;
        }
      }
    }
  }
  for (auto& p : ready) p.conn->send_params(s.id, new_step, snapshot);
  return "";
}

void PsServer::Impl::pull(const std::shared_ptr<Connection>& c, uint32_t id, int64_t min_step) {
  Slice* s = nullptr;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!failure_.empty()) return c->send_error(failure_, failure_is_timeout_);
    auto it = slices_.find(id);
    if (it == slices_.end()) {
      if (sealed_) return c->send_error(missing_slice(id));
      orphan_pulls_.push_back({c, min_step, id, Clock::now()});
      return;
    }
    s = it->second.get();
  }
  std::lock_guard<std::mutex> lock(s->mu);
  if (s->step >= min_step || options_.mode == Mode::kAsync) {
    c->send_params(id, s->step, s->values);
  } else {
    s->pending.push_back({c, min_step, id, Clock::now()});
  }
}

// Values and optimizer state of one slice, copied at one instant.
void PsServer::Impl::pull_state(const std::shared_ptr<Connection>& c, uint32_t id) {
  Slice* s = find_slice(id);
  if (s == nullptr) return c->send_error(name() + ": pull_state of slice " + std::to_string(id) + ", which was never initialised");
  std::lock_guard<std::mutex> lock(s->mu);
  auto state = s->opt->state();
  auto out = std::make_shared<std::vector<float>>();
  out->reserve(s->size * (1 + state.size()));
  out->insert(out->end(), s->values->begin(), s->values->end());
  for (const auto& st : state) {
    if (st.size != s->size) return c->send_error(name() + ": optimizer state of slice " + std::to_string(id) + " has an unexpected size");
    out->insert(out->end(), st.data, st.data + st.size);
  }
  c->send_params(id, s->step, std::move(out), Op::kState, static_cast<uint32_t>(state.size()));
}

}  // namespace muster::runtime::ps
