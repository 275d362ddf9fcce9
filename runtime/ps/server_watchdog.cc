// How a PS task's job ends: every worker done (or, after the first DONE, the
// rest lost or late), or a failure: a step, a pull or the chief's init that
// waited longer than timeout_ms fails the server and tells every waiting
// worker why.

#include <algorithm>

#include <spdlog/spdlog.h>

#include "runtime/ps/server_connection.h"
#include "runtime/ps/server_impl.h"

namespace muster::runtime::ps {

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

}  // namespace muster::runtime::ps
