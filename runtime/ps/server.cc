// PsServer implementation. The protocol steps are in protocol.h; the
// SyncReplicas rules for one slice are in Impl::push() below.

#include "runtime/ps/server.h"
#include "runtime/ps/server_connection.h"

#include <spdlog/spdlog.h>

namespace muster::runtime::ps {

PsServer::Impl::Impl(const ServerOptions& o) : opt_(o), acceptor_(io_), watchdog_timer_(io_) {
  boost::system::error_code ec;
  auto addr = asio::ip::make_address(o.host, ec);
  if (ec) throw InvalidArgument("ps task " + std::to_string(o.task_index) + ": bad listen host '" + o.host + "'");
  tcp::endpoint ep(addr, o.port);
  acceptor_.open(ep.protocol());
  acceptor_.set_option(tcp::acceptor::reuse_address(true));
  acceptor_.bind(ep, ec);
  if (ec) {
    throw CommError(name() + ": cannot listen on " + o.host + ":" + std::to_string(o.port) + ": " + ec.message());
  }
  acceptor_.listen(asio::socket_base::max_listen_connections);
  port_ = acceptor_.local_endpoint().port();
  if (opt_.secret.empty()) {
    spdlog::warn("{}: no secret configured (MUSTER_PS_SECRET): any client that reaches port {} can join this job", name(),
                 port_);
  }
}

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

void PsServer::Impl::worker_done(int worker) {
  std::lock_guard<std::mutex> lock(mu_);
  if (done_.empty()) first_done_ = Clock::now();
  done_.insert(worker);
  spdlog::info("{}: worker {} done ({} of {})", name(), worker, done_.size(), options_.total_num_replicas);
  check_finished_locked();
}

void PsServer::Impl::connection_lost(int worker, bool done) {
  if (worker < 0) return;
  std::lock_guard<std::mutex> lock(mu_);
  if (--live_[worker] > 0 || done || done_.count(worker) || stopping_) return;
  spdlog::warn("{}: lost worker {} before it was done", name(), worker);
  lost_.insert(worker);
  check_finished_locked();
}

void PsServer::Impl::check_finished_locked() {
  if (finished_ || !have_options_ || done_.empty()) return;
  std::size_t accounted = done_.size();
  for (int w : lost_) accounted += done_.count(w) ? 0 : 1;
  if (accounted >= options_.total_num_replicas) {
    if (accounted > done_.size()) spdlog::warn("{}: finishing with {} worker(s) lost", name(), accounted - done_.size());
    finished_ = true;
    cv_.notify_all();
  }
}

void PsServer::Impl::fail(const std::string& reason, bool timeout) {
  std::vector<std::shared_ptr<Connection>> to_tell;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (finished_) return;
    finished_ = true;
    failure_ = reason;
    failure_is_timeout_ = timeout;
    for (auto& p : orphan_pulls_) to_tell.push_back(p.conn);
    orphan_pulls_.clear();
    for (auto& [id, s] : slices_) {
      std::lock_guard<std::mutex> sl(s->mu);
      for (auto& p : s->pending) to_tell.push_back(p.conn);
      s->pending.clear();
    }
    cv_.notify_all();
  }
  spdlog::error("{}", reason);
  for (auto& c : to_tell) c->send_error(reason, timeout);
}

// Every tick: a step that has waited for its missing gradients, or a pull
// that has waited for its step or for the chief's init, longer than the
// timeout fails the server (and tells every waiting worker why).
void PsServer::Impl::watchdog() {
  const int tick = std::max(10, std::min(100, opt_.timeout_ms / 10));
  watchdog_timer_.expires_after(std::chrono::milliseconds(tick));
  watchdog_timer_.async_wait([this](boost::system::error_code ec) {
    if (ec) return;
    const auto now = Clock::now();
    const auto limit = std::chrono::milliseconds(opt_.timeout_ms);
    sweep();
    std::string reason;
    bool finish_anyway = false;
    std::vector<PendingPull> expired;  // pulls of slices that never appeared, the chief being there
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (finished_) return;
      auto lost_list = [&] {
        std::string l;
        for (int w : lost_) l += (l.empty() ? "" : ", ") + std::to_string(w);
        return l.empty() ? std::string("none disconnected") : "lost worker(s): " + l;
      };
      for (auto it = orphan_pulls_.begin(); it != orphan_pulls_.end();) {
        if (now - it->since <= limit) {
          ++it;
        } else if (chief_seen_) {  // only that puller loses its connection
          expired.push_back(std::move(*it));
          it = orphan_pulls_.erase(it);
        } else {
          reason = name() + ": slice " + std::to_string(it->slice) + " was not initialised by the chief within " +
                   std::to_string(opt_.timeout_ms) + " ms (is worker 0 / the chief running?)";
          ++it;
        }
      }
      for (auto& [id, s] : slices_) {
        if (!reason.empty()) break;
        std::lock_guard<std::mutex> sl(s->mu);
        if (s->count > 0 && now - s->first_push > limit) {
          reason = name() + ": timed out after " + std::to_string(opt_.timeout_ms) + " ms waiting for gradients of step " +
                   std::to_string(s->step) + " (slice " + std::to_string(id) + " has " + std::to_string(s->count) + " of " +
                   std::to_string(options_.replicas_to_aggregate) + "; " + lost_list() +
                   "); a worker died and there are no backup workers to replace it";
        }
        for (auto& p : s->pending) {
          if (reason.empty() && now - p.since > limit) {
            reason = name() + ": timed out after " + std::to_string(opt_.timeout_ms) + " ms: step " + std::to_string(s->step) +
                     " of slice " + std::to_string(id) + " never completed (" + lost_list() + ")";
          }
        }
      }
      if (reason.empty() && !done_.empty() && now - first_done_ > limit) finish_anyway = true;
    }
    for (auto& p : expired) p.conn->send_error(missing_slice(p.slice));
    if (!reason.empty()) return fail(reason, true);
    if (finish_anyway) {
      std::lock_guard<std::mutex> lock(mu_);
      spdlog::warn("{}: {} of {} workers done; not waiting longer for the rest", name(), done_.size(), options_.total_num_replicas);
      finished_ = true;
      cv_.notify_all();
      return;
    }
    watchdog();
  });
}

void PsServer::Impl::stop() {
  std::vector<std::shared_ptr<Connection>> conns;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopped_) return;
    stopped_ = true;
    stopping_ = true;
    if (!finished_) {
      finished_ = true;
      failure_ = name() + ": stopped";
    }
    for (auto& w : conns_) {
      if (auto c = w.lock()) conns.push_back(c);
    }
    cv_.notify_all();
  }
  asio::post(io_, [this] {
    boost::system::error_code ec;
    acceptor_.close(ec);
    watchdog_timer_.cancel();
  });
  for (auto& c : conns) c->close();
  conns.clear();
  // Let the closes run, then end the io threads.
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  io_.stop();
  for (auto& t : threads_) {
    if (t.joinable()) t.join();
  }
  // Drop what still refers to connections so their sockets close now.
  std::lock_guard<std::mutex> lock(mu_);
  orphan_pulls_.clear();
  for (auto& [id, s] : slices_) {
    std::lock_guard<std::mutex> sl(s->mu);
    s->pending.clear();
  }
}

PsServer::PsServer(const ServerOptions& options) : impl_(std::make_unique<Impl>(options)) {}

PsServer::~PsServer() { stop(); }

unsigned short PsServer::port() const { return impl_->port_; }

void PsServer::start() {
  impl_->accept();
  impl_->watchdog();
  for (int i = 0; i < std::max(1, impl_->opt_.threads); ++i) {
    impl_->threads_.emplace_back([this] {
      for (;;) {
        try {
          impl_->io_.run();
          return;
        } catch (const std::exception& e) {
          spdlog::error("{}: io thread: {}", impl_->name(), e.what());
        }
      }
    });
  }
}

bool PsServer::wait_for(int ms) {
  std::unique_lock<std::mutex> lock(impl_->mu_);
  return impl_->cv_.wait_for(lock, std::chrono::milliseconds(ms), [this] { return impl_->finished_; });
}

void PsServer::wait() {
  std::string failure;
  bool timeout = false;
  {
    std::unique_lock<std::mutex> lock(impl_->mu_);
    impl_->cv_.wait(lock, [this] { return impl_->finished_; });
    failure = impl_->failure_;
    timeout = impl_->failure_is_timeout_;
  }
  if (failure.empty()) return;
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // let the error frames reach the workers
  if (timeout) throw TimeoutError(failure);
  throw CommError(failure);
}

void PsServer::stop() { impl_->stop(); }

ServerStats PsServer::stats() const {
  ServerStats s;
  s.pushes_accepted = impl_->pushes_accepted_;
  s.stale_dropped = impl_->stale_dropped_;
  s.steps_applied = impl_->steps_applied_;
  s.bad_frames = impl_->bad_frames_;
  s.bytes_in = impl_->bytes_in_;
  s.bytes_out = impl_->bytes_out_;
  s.auth_failures = impl_->auth_failures_;
  s.refused = impl_->refused_;
  s.timed_out = impl_->timed_out_;
  s.init_bytes_buffered = impl_->init_buffered_;
  s.open_connections = impl_->open_;
  std::lock_guard<std::mutex> lock(impl_->mu_);
  s.workers_done = static_cast<int>(impl_->done_.size());
  return s;
}

int64_t PsServer::global_step(uint32_t slice) const {
  Slice* s = impl_->find_slice(slice);
  if (s == nullptr) return -1;
  std::lock_guard<std::mutex> lock(s->mu);
  return s->step;
}

}  // namespace muster::runtime::ps
