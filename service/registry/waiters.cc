// WorkerRegistry's long-polls: await (POST /api/v1/workers/await) and a held
// worker's wait-release, with release() that answers the latter. Neither
// holds a thread: a waiter is a callback, called once from the thread that
// settles it (or from tick() at its deadline).
#include "service/registry/registry.h"

namespace muster::service {

using api::WorkerStatus;

api::Status WorkerRegistry::await_workers(const api::AwaitRequest& request, AwaitCallback done) {
  Effects fx;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& id : request.ids) {
      if (!records_.count(id)) return api::not_found("no worker '" + id + "'");
    }
    auto waiter = std::make_shared<Waiter>();
    waiter->request = request;
    if (request.timeout_seconds > 0) {
      waiter->deadline = clock_.now() + seconds_duration(request.timeout_seconds);
    }
    waiter->done = std::move(done);
    for (const auto& id : request.ids) {
      if (api::is_terminal(records_.at(id).worker.status)) waiter->ended_before.insert(id);
    }
    waiters_.push_back(std::move(waiter));
    settle_waiters(fx, /*at_tick=*/false);
  }
  run(std::move(fx));
  return api::Status::ok();
}

// Step by step, for each waiter: a worker settles as a success (running with
// an IP for options_.await_settle, or, once awaited, succeeded after running;
// succeeded when waiting for completion) or a failure (any other terminal
// status, and a success that came before the await); when every worker settled, or
// the deadline passed (then the pending ones go to the failures as they are,
// with reason "timed out (still <status>)", and a running one counts as
// running when waiting for running), the waiter's callback is queued with both
// lists in request order and the waiter is dropped.
void WorkerRegistry::settle_waiters(Effects& fx, bool at_tick) {
  const TimePoint now = clock_.now();
  // Whether a worker is settled for `w` (every registration of a launch of
  // n calls this: it must not copy n workers each time). A running worker
  // settles once it has run for await_settle (held ones at once); either way
  // it can only stay settled or end, which settles it too.
  auto settled = [&](const Waiter& w, const Record& r) {
    const api::Worker& worker = r.worker;
    if (api::is_terminal(worker.status)) return true;
    if (w.request.wait_for_completion) return false;
    return api::is_reachable(worker) &&
           (r.hold || now - r.running_since >= options_.await_settle);
  };
  for (auto it = waiters_.begin(); it != waiters_.end();) {
    Waiter& w = **it;
    const bool expired = at_tick && w.deadline && now >= *w.deadline;
    if (!expired) {
      // A settled worker stays settled, so the scan resumes where it stopped.
      auto& ids = w.request.ids;
      while (w.settled_prefix < ids.size()) {
        auto rec = records_.find(ids[w.settled_prefix]);
        if (rec != records_.end() && !settled(w, rec->second)) break;
        ++w.settled_prefix;
      }
      if (w.settled_prefix < ids.size()) {
        ++it;
        continue;
      }
    }
    AwaitResult result;
    bool pending = false;
    for (const auto& id : w.request.ids) {
      auto rec = records_.find(id);
      if (rec == records_.end()) {
        api::Worker gone;
        gone.id = id;
        gone.status = WorkerStatus::kFailed;
        gone.reason = "the worker no longer exists";
        result.failures.push_back(gone);
        continue;
      }
      const api::Worker& worker = rec->second.worker;
      const bool up = api::is_reachable(worker);
      const bool settled = rec->second.hold || expired || now - rec->second.running_since >= options_.await_settle;
      // A script that ran and succeeded while awaited (within the settle
      // time) was running; one that had ended before the await is not.
      const bool ran_fine = !w.ended_before.count(id) && worker.status == WorkerStatus::kSucceeded &&
                            api::has_address(worker);
      const bool ok = w.request.wait_for_completion ? worker.status == WorkerStatus::kSucceeded
                                                    : (up && settled) || ran_fine;
      if (ok) {
        result.workers.push_back(worker);
      } else if (api::is_terminal(worker.status)) {
        result.failures.push_back(worker);
      } else if (expired) {
        // Left as it is (not stopped, its status kept): the await ran out, the worker did not fail.
        api::Worker late = worker;
        late.reason = std::string("timed out (still ") + api::worker_status_name(worker.status) +
                      (worker.status == WorkerStatus::kRunning && !api::has_address(worker)
                           ? ", without an IP address yet"
                           : "") +
                      (worker.reason.empty() ? "" : ": " + worker.reason) + ")";
        result.failures.push_back(late);
      } else {
        pending = true;
      }
    }
    if (pending) {
      ++it;
      continue;
    }
    fx.callbacks.push_back([done = w.done, result = std::move(result)]() mutable { done(std::move(result)); });
    it = waiters_.erase(it);
  }
}

size_t WorkerRegistry::pending_awaits() const {
  std::lock_guard<std::mutex> lock(mu_);
  return waiters_.size();
}

api::Status WorkerRegistry::agent_wait_release(const std::string& id, ReleaseCallback done) {
  std::optional<Release> ready;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = records_.find(id);
    if (it == records_.end()) return api::not_found("no worker '" + id + "'");
    Record& r = it->second;
    if (api::is_terminal(r.worker.status)) {
      return api::conflict("worker " + id + " is " + api::worker_status_name(r.worker.status));
    }
    if (!r.hold) return api::conflict("worker " + id + " is not held; it needs no release");
    r.last_heartbeat = clock_.now();  // a waiting agent is alive
    if (!r.release) {
      release_waiters_.push_back({id, clock_.now() + options_.release_poll, std::move(done)});
      return api::Status::ok();
    }
    ready = r.release;
  }
  done(std::move(ready));
  return api::Status::ok();
}

api::Status WorkerRegistry::release(const std::string& id, Release release) {
  if (auto s = api::validate_release(release); !s) return s;
  Effects fx;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = records_.find(id);
    if (it == records_.end()) return api::not_found("no worker '" + id + "'");
    Record& r = it->second;
    if (!r.hold) return api::conflict("worker " + id + " is not held");
    if (api::is_terminal(r.worker.status)) {
      return api::conflict("worker " + id + " is " + api::worker_status_name(r.worker.status));
    }
    r.release = std::move(release);
    if (r.worker.reason == "waiting for release") r.worker.reason = "";
    mark_dirty(r);
    write_dirty_locked();
    fx.changed.push_back(r.worker);
    for (auto w = release_waiters_.begin(); w != release_waiters_.end();) {
      if (w->id == id) {
        fx.callbacks.push_back([done = std::move(w->done), rel = *r.release]() mutable { done(std::move(rel)); });
        w = release_waiters_.erase(w);
      } else {
        ++w;
      }
    }
  }
  run(std::move(fx));
  return api::Status::ok();
}

// At tick(): a wait-release whose worker ended, or that waited its
// release_poll, is answered "ask again" (the agent polls anew or learns the
// worker ended).
void WorkerRegistry::expire_release_waiters(TimePoint now, Effects& fx) {
  for (auto w = release_waiters_.begin(); w != release_waiters_.end();) {
    auto rec = records_.find(w->id);
    const bool gone = rec == records_.end() || api::is_terminal(rec->second.worker.status);
    if (gone || now >= w->deadline) {
      fx.callbacks.push_back([done = std::move(w->done)] { done(std::nullopt); });
      w = release_waiters_.erase(w);
    } else {
      ++w;
    }
  }
}

}  // namespace muster::service
