// WorkerRegistry's persistence: changes reach the Store as dirty records
// (written at once, and again by tick() while the store refuses them), and
// restore() rebuilds the records of an earlier daemon (the stored form is
// service/registry/worker_record.h), refusing state that lost workers.
#include <spdlog/spdlog.h>

#include <system_error>

#include "service/registry/registry.h"

namespace muster::service {

namespace fs = std::filesystem;
using api::WorkerStatus;

void WorkerRegistry::write_dirty_locked() {
  if (dirty_.empty()) return;
  if (!store_) {
    dirty_.clear();
    return;
  }
  std::vector<StoredRecord> rows;
  rows.reserve(dirty_.size());
  for (const auto& id : dirty_) {
    auto it = records_.find(id);
    if (it != records_.end()) rows.push_back(StoredRecord{id, it->second.seq, record_to_json(it->second)});
  }
  // A failure is logged once per episode by the store's health; the rows
  // stay dirty and go again with the next change or tick.
  if (store_->put(rows)) dirty_.clear();
}

size_t WorkerRegistry::dirty_records() const {
  std::lock_guard<std::mutex> lock(mu_);
  return dirty_.size();
}

namespace {

// The directories under <state>/workers that `known` does not name. An empty
// one is a launch that died before its records were committed, and is
// removed here; the others are returned.
std::vector<std::string> unknown_worker_dirs(const fs::path& root, const std::function<bool(const std::string&)>& known) {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(root, ec)) {
    if (!entry.is_directory(ec)) continue;
    const std::string name = entry.path().filename().string();
    if (known(name)) continue;
    if (fs::is_empty(entry.path(), ec)) {
      fs::remove(entry.path(), ec);
      continue;
    }
    out.push_back(name);
  }
  return out;
}

std::string some(const std::vector<std::string>& ids) {
  std::string out;
  for (size_t i = 0; i < ids.size() && i < 5; ++i) out += (i ? ", " : "") + ids[i];
  if (ids.size() > 5) out += ", ...";
  return out;
}

}  // namespace

// Step by step: a) load every row, logging the ones that cannot be read; b)
// under the mutex, rebuild each record (timeouts count from now, a finished
// worker's age from its finished_at), take back its GPUs, and fail a
// `scheduling` worker of a backend that does not queue (its launch never
// reached the backend, or did so only half: an agent that did start is
// refused at registration and exits); c) compare the worker directories with
// the records: directories with content and no record mean the database lost
// rows (deleted, emptied, its -wal lost): refuse, or adopt them as `lost`;
// d) outside the mutex, hand the backend the process identities of the
// workers that have not finished, so that poll() and stop() reach the
// earlier daemon's agents.
api::Status WorkerRegistry::restore(const RestoreOptions& options) {
  std::vector<std::string> skipped;
  std::vector<StoredRecord> rows;
  if (store_) {
    auto loaded = store_->load_all(&skipped);
    if (!loaded) return loaded.status();
    rows = std::move(loaded).value();
  }
  Effects fx;
  std::vector<std::pair<std::string, std::string>> adopt;  // id, process identity
  std::unique_lock<std::mutex> lock(mu_);
  const TimePoint now = clock_.now();
  const WallTime wall = clock_.wall();
  for (auto& row : rows) {
    auto restored = record_from_json(row.record, row.seq);
    if (!restored) {
      skipped.push_back(row.id + ": " + restored.status().message());
      continue;
    }
    Record r = std::move(restored).value();
    if (!api::is_terminal(r.worker.status) && !r.worker.gpu_devices.empty()) {
      options_.gpus->adopt(r.worker.id, parse_device_list(r.worker.gpu_devices));
    }
    r.launched_at = now;
    r.last_heartbeat = now;
    if (api::is_terminal(r.worker.status)) {
      // Its age so far by the calendar (display time), then on our clock.
      auto finished_at = r.worker.finished_at ? api::parse_rfc3339(*r.worker.finished_at) : std::nullopt;
      auto age = finished_at && *finished_at < wall ? wall - *finished_at : WallTime::duration::zero();
      r.finished = now - std::chrono::duration_cast<TimePoint::duration>(age);
    }
    next_seq_ = std::max(next_seq_, r.seq + 1);
    if (!r.agent_token.empty()) token_to_id_.set(r.agent_token, r.worker.id);
    by_seq_[r.seq] = r.worker.id;
    auto& placed = records_[r.worker.id] = std::move(r);
    if (placed.worker.status == WorkerStatus::kRunning) ++running_;  // transition() counts from here on
    if (placed.worker.status == WorkerStatus::kScheduling && !backend_.queues_workers()) {
      transition(placed, WorkerStatus::kFailed, "the daemon restarted before the worker was launched", fx);
    }
    if (!api::is_terminal(placed.worker.status) && !placed.process.empty()) {
      adopt.emplace_back(placed.worker.id, placed.process);
    }
  }
  for (const auto& s : skipped) spdlog::error("state database: skipped a worker row that cannot be read: {}", s);

  const auto orphans = unknown_worker_dirs(options_.state_dir / "workers",
                                           [this](const std::string& id) { return records_.count(id) > 0; });
  if (!orphans.empty()) {
    if (auto s = adopt_orphans_locked(orphans, options, fx); !s) {
      records_.clear();
      running_ = 0;
      by_seq_.clear();
      token_to_id_.clear();
      dirty_.clear();
      return s;
    }
  }
  // Their agents beat at what the last daemon told them, which is not
  // stored: the interval this daemon's budget gives the same fleet (the
  // same flags give the same), until each one's next beat tells it anew.
  const auto told = heartbeat_interval_locked();
  for (auto& [id, r] : records_) {
    if (r.worker.status == WorkerStatus::kRunning) r.heartbeat_every = told;
  }
  write_dirty_locked();
  lock.unlock();
  for (const auto& [id, process] : adopt) backend_.adopt(id, process);
  // No listeners or waiters exist yet; nothing to run.
  return api::Status::ok();
}

api::Status WorkerRegistry::adopt_orphans_locked(const std::vector<std::string>& orphans,
                                                 const RestoreOptions& options, Effects& fx) {
  const fs::path root = options_.state_dir / "workers";
  const std::string db = store_ ? "the state database" : "the registry";
  if (!options.adopt_orphans) {
    return api::internal_error(
        db + " has no record of " + std::to_string(orphans.size()) + " worker director" +
        (orphans.size() == 1 ? "y" : "ies") + " under " + root.string() + " (" + some(orphans) +
        "): the database was lost, emptied or rolled back. musterd does not start on it, as it would hide those "
        "workers. Restore <state-dir>/musterd.db (and its -wal file), or start with --adopt-orphaned-workers to "
        "list them as lost");
  }
  const std::string now = format_time(clock_.wall());
  for (const auto& id : orphans) {
    Record r;
    r.worker.id = id;
    r.worker.status = WorkerStatus::kLost;
    r.worker.reason = "the state database had no record of this worker; its directory was adopted at start";
    r.worker.created_at = now;
    r.worker.finished_at = now;
    r.finished = clock_.now();
    r.log_path = root / id / "output.log";
    r.seq = next_seq_++;
    by_seq_[r.seq] = id;
    mark_dirty(r);
    fx.changed.push_back(r.worker);
    records_[id] = std::move(r);
  }
  spdlog::warn("adopted {} worker director{} without a record under {} as lost workers ({})", orphans.size(),
               orphans.size() == 1 ? "y" : "ies", root.string(), some(orphans));
  return api::Status::ok();
}

}  // namespace muster::service
