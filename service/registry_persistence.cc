// WorkerRegistry's persistence: every record change goes to the Store
// before the registry acts on it, and restore() rebuilds the records of an
// earlier daemon (the stored form is service/worker_record.h).
#include "service/registry.h"

namespace muster::service {

using api::WorkerStatus;

api::Status WorkerRegistry::persist(const Record& r) {
  if (!store_) return api::Status::ok();
  nlohmann::json rec = record_to_json(r);
  if (deferred_) {
    // A later write of the same worker replaces the earlier one.
    for (auto& d : *deferred_) {
      if (d.id == r.worker.id) {
        d.record = std::move(rec);
        return api::Status::ok();
      }
    }
    deferred_->push_back(StoredRecord{r.worker.id, r.seq, std::move(rec)});
    return api::Status::ok();
  }
  return store_->put({StoredRecord{r.worker.id, r.seq, std::move(rec)}});
}

api::Status WorkerRegistry::flush_deferred(std::vector<StoredRecord>& rows) {
  deferred_ = nullptr;
  if (!store_ || rows.empty()) return api::Status::ok();
  return store_->put(rows);
}

// Step by step: a) load every row; b) under the mutex, rebuild each record
// (timeouts count from now), take back its GPUs, and fail a `scheduling`
// worker of a backend that does not queue (its launch never reached the
// backend, or did so only half: an agent that did start is refused at
// registration and exits); c) outside the mutex, hand the backend the
// process identities of the workers that have not finished, so that poll()
// and stop() reach the earlier daemon's agents.
api::Status WorkerRegistry::restore() {
  if (!store_) return api::Status::ok();
  auto rows = store_->load_all();
  if (!rows) return rows.status();
  Effects fx;
  std::vector<std::pair<std::string, std::string>> adopt;  // id, process identity
  std::unique_lock<std::mutex> lock(mu_);
  const TimePoint now = clock_.now();
  for (auto& row : rows.value()) {
    auto restored = record_from_json(row.record, row.seq);
    if (!restored) continue;
    Record r = std::move(restored).value();
    if (!api::is_terminal(r.worker.status) && !r.worker.gpu_devices.empty()) {
      options_.gpus->adopt(r.worker.id, parse_device_list(r.worker.gpu_devices));
    }
    r.launched_at = now;
    r.last_heartbeat = now;
    next_seq_ = std::max(next_seq_, r.seq + 1);
    if (!r.agent_token.empty()) token_to_id_[r.agent_token] = r.worker.id;
    auto& placed = records_[r.worker.id] = std::move(r);
    if (placed.worker.status == WorkerStatus::kScheduling && !backend_.queues_workers()) {
      (void)transition(placed, WorkerStatus::kFailed, "the daemon restarted before the worker was launched", fx);
    }
    if (!api::is_terminal(placed.worker.status) && !placed.process.empty()) {
      adopt.emplace_back(placed.worker.id, placed.process);
    }
  }
  lock.unlock();
  for (const auto& [id, process] : adopt) backend_.adopt(id, process);
  // No listeners or waiters exist yet; nothing to run.
  return api::Status::ok();
}

}  // namespace muster::service
