// WorkerRegistry's records and state machine: transitions (stored before
// they count), the effects run after the mutex is released, the queries,
// and stop through the API. The other parts are listed in registry.h.
#include "service/registry.h"

#include <algorithm>
#include <atomic>
#include <set>
#include <thread>

namespace muster::service {

using api::WorkerStatus;

WorkerRegistry::WorkerRegistry(RegistryOptions options, workers::Backend& backend, Store* store, const Clock& clock)
    : options_(std::move(options)),
      backend_(backend),
      store_(store),
      clock_(clock),
      stops_(options_.async_backend ? 1 : 0),
      launches_(options_.async_backend ? std::max<size_t>(options_.launch_threads, 1) : 0) {
  if (!options_.gpus) options_.gpus = &no_gpus_;
}

WorkerRegistry::~WorkerRegistry() = default;

std::string WorkerRegistry::agent_url() const {
  return api::agent_url(backend_.master_address(), options_.daemon_port);
}

void WorkerRegistry::wait_for_launches() { launches_.drain(); }

void WorkerRegistry::shutdown() {
  launches_.close();
  stops_.close();
}

api::Status WorkerRegistry::transition(Record& r, WorkerStatus to, std::string reason, Effects& fx) {
  if (!api::can_transition(r.worker.status, to)) return api::Status::ok();
  const Record before = r;
  r.worker.status = to;
  r.worker.reason = std::move(reason);
  const std::string now = format_time(clock_.now());
  if (to == WorkerStatus::kRunning) {
    r.worker.started_at = r.worker.running_at = now;
    r.running_since = clock_.now();
  }
  if (api::is_terminal(to)) r.worker.finished_at = now;
  if (auto s = persist(r); !s) {
    r = before;  // nothing half-written: memory stays what the store holds
    return s;
  }
  // Its devices go back now (the process tree is being stopped or is gone).
  if (api::is_terminal(to) && !r.worker.gpu_devices.empty()) options_.gpus->release(r.worker.id);
  fx.changed.push_back(r.worker);
  return api::Status::ok();
}

void WorkerRegistry::run(Effects fx) {
  std::vector<Listener> listeners;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [handle, l] : listeners_) listeners.push_back(l);
  }
  for (const auto& w : fx.changed) {
    for (const auto& l : listeners) l(w);
  }
  for (auto& cb : fx.callbacks) cb();
  for (auto& id : fx.to_stop) {
    stops_.post([this, id = std::move(id)] { (void)backend_.stop(id, options_.stop_grace); });
  }
}

void WorkerRegistry::forget(const std::vector<std::string>& ids) {
  for (const auto& id : ids) {
    auto it = records_.find(id);
    if (it == records_.end()) continue;
    options_.gpus->release(id);
    token_to_id_.erase(it->second.agent_token);
    records_.erase(it);
  }
}

std::vector<api::Worker> WorkerRegistry::list() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<const Record*> ordered;
  for (const auto& [id, r] : records_) ordered.push_back(&r);
  std::sort(ordered.begin(), ordered.end(), [](const Record* a, const Record* b) { return a->seq < b->seq; });
  std::vector<api::Worker> out;
  for (const Record* r : ordered) out.push_back(r->worker);
  return out;
}

api::Result<api::Worker> WorkerRegistry::get(const std::string& id) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = records_.find(id);
  if (it == records_.end()) return api::not_found("no worker '" + id + "'");
  return it->second.worker;
}

api::Result<std::filesystem::path> WorkerRegistry::log_path(const std::string& id) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = records_.find(id);
  if (it == records_.end()) return api::not_found("no worker '" + id + "'");
  return it->second.log_path;
}

api::Result<std::vector<api::Worker>> WorkerRegistry::stop(const std::vector<std::string>& ids) {
  return stop(ids, "stopped through the API");
}

api::Result<std::vector<api::Worker>> WorkerRegistry::stop(const std::vector<std::string>& ids,
                                                           const std::string& reason) {
  std::vector<std::string> targets;
  Effects fx;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (ids.empty()) {
      for (const auto& [id, r] : records_) {
        if (!api::is_terminal(r.worker.status)) targets.push_back(id);
      }
    } else {
      std::set<std::string> seen;  // a list may name a worker many times
      for (const auto& id : ids) {
        if (!records_.count(id)) return api::not_found("no worker '" + id + "'");
        if (seen.insert(id).second) targets.push_back(id);
      }
    }
    // Every transition in one transaction; if it fails, nothing changed.
    std::map<std::string, Record> before;
    std::vector<StoredRecord> rows;
    deferred_ = &rows;
    for (const auto& id : targets) {
      before.emplace(id, records_.at(id));
      (void)transition(records_.at(id), WorkerStatus::kStopped, reason, fx);
    }
    if (auto s = flush_deferred(rows); !s) {
      for (auto& [id, r] : before) records_[id] = std::move(r);
      return s;
    }
    settle_waiters(fx, false);
  }
  // (A worker whose launch is with the backend right now is stopped again
  // once the backend returns: see start_batch().)
  stop_processes(targets);
  run(std::move(fx));
  std::vector<api::Worker> out;
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& id : targets) {
    auto it = records_.find(id);
    if (it != records_.end()) out.push_back(it->second.worker);
  }
  return out;
}

// Stops the process trees in parallel (each may take up to the grace
// period), on at most kStopThreads threads however many workers there are.
void WorkerRegistry::stop_processes(const std::vector<std::string>& ids) {
  constexpr size_t kStopThreads = 8;
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t i = next++; i < ids.size(); i = next++) (void)backend_.stop(ids[i], options_.stop_grace);
  };
  std::vector<std::thread> threads;
  for (size_t t = 1; t < std::min(kStopThreads, ids.size()); ++t) threads.emplace_back(work);
  work();
  for (auto& t : threads) t.join();
}

int WorkerRegistry::subscribe(Listener listener) {
  std::lock_guard<std::mutex> lock(mu_);
  listeners_[next_listener_] = std::move(listener);
  return next_listener_++;
}

void WorkerRegistry::unsubscribe(int handle) {
  std::lock_guard<std::mutex> lock(mu_);
  listeners_.erase(handle);
}

}  // namespace muster::service
