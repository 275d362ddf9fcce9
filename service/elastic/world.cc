#include "service/elastic/world.h"

#include <algorithm>

namespace muster::service::elastic {

namespace {

bool contains(const std::vector<std::string>& v, const std::string& x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

}  // namespace

World::World(WorldOptions options, const Clock& clock)
    : options_(std::move(options)), clock_(clock), kv_(options_.max_kv_bytes) {}

void World::run(Effects& fx) {
  for (auto& f : fx) f();
  fx.clear();
}

std::string World::member_name_locked(const std::string& worker_id) const {
  auto it = std::find(members_.begin(), members_.end(), worker_id);
  if (it == members_.end()) return "worker " + worker_id;
  return "rank " + std::to_string(it - members_.begin()) + " (worker " + worker_id + ")";
}

api::Status World::closed_locked() const {
  return api::conflict("cluster " + options_.cluster_id + "'s world is closed: " + closed_.value_or(""));
}

api::Status World::outsider_locked(const std::string& worker_id) const {
  auto why = removed_.find(worker_id);
  return api::conflict("worker " + worker_id + " is not part of cluster " + options_.cluster_id + "'s world: " +
                       (why == removed_.end() ? std::string("it was never released into it") : why->second));
}

api::Status World::unformed_locked(int generation) const {
  return api::invalid_argument("generation " + std::to_string(generation) +
                                   " has not formed: the world is at generation " + std::to_string(generation_),
                               "generation");
}

// ---- The manager's side.

void World::admit(const std::string& worker_id) {
  std::lock_guard<std::mutex> lock(mu_);
  if (closed_ || admitted_.count(worker_id)) return;
  admitted_[worker_id] = next_order_++;
  removed_.erase(worker_id);
}

bool World::admitted(const std::string& worker_id) const {
  std::lock_guard<std::mutex> lock(mu_);
  return admitted_.count(worker_id) > 0;
}

void World::remove(const std::string& worker_id, const std::string& reason) {
  Effects fx;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!admitted_.erase(worker_id)) return;
    removed_[worker_id] = reason;
    const api::Status out = api::conflict("worker " + worker_id + " is no longer part of cluster " +
                                          options_.cluster_id + "'s world: " + reason);
    if (auto it = round_.find(worker_id); it != round_.end()) {
      if (it->second.parked) fx.push_back([done = std::move(*it->second.parked), out] { done(out); });
      round_.erase(it);
    }
    kv_.drop(worker_id, out, fx);
    for (auto it = watchers_.begin(); it != watchers_.end();) {
      if (it->worker_id != worker_id) {
        ++it;
        continue;
      }
      fx.push_back([done = std::move(it->done), out] { done(out); });
      it = watchers_.erase(it);
    }
    if (contains(members_, worker_id)) break_locked(worker_id, member_name_locked(worker_id) + " " + reason, fx);
    form_locked(fx);
    wake_watchers_locked(fx);
  }
  run(fx);
}

void World::retire(const std::string& worker_id) {
  Effects fx;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!admitted_.erase(worker_id)) return;
    removed_[worker_id] = "it finished";
    if (auto it = round_.find(worker_id); it != round_.end()) {
      if (it->second.parked) fx.push_back([done = std::move(*it->second.parked)] { done(proto::Assignment{}); });
      round_.erase(it);
    }
    form_locked(fx);
  }
  run(fx);
}

void World::close(const std::string& reason) {
  Effects fx;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (closed_) return;
    closed_ = reason;
    const api::Status out = closed_locked();
    for (auto& [id, j] : round_) {
      if (j.parked) fx.push_back([done = std::move(*j.parked), out] { done(out); });
    }
    round_.clear();
    kv_.fail_all(out, fx);
    for (auto& w : watchers_) fx.push_back([done = std::move(w.done), out] { done(out); });
    watchers_.clear();
  }
  run(fx);
}

void World::tick() {
  Effects fx;
  {
    std::lock_guard<std::mutex> lock(mu_);
    const TimePoint now = clock_.now();
    for (auto& [id, j] : round_) {
      if (j.parked && now >= j.deadline) {
        fx.push_back([done = std::move(*j.parked)] { done(proto::Assignment{}); });
        j.parked.reset();
      }
    }
    kv_.expire(now, fx);
    for (auto it = watchers_.begin(); it != watchers_.end();) {
      if (now < it->deadline) {
        ++it;
        continue;
      }
      fx.push_back([done = std::move(it->done), v = view_locked(it->generation)] { done(v); });
      it = watchers_.erase(it);
    }
    form_locked(fx);
  }
  run(fx);
}

std::vector<WorldEvent> World::drain_events() {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<WorldEvent> out;
  out.swap(events_);
  return out;
}

// ---- Generations.

void World::break_locked(const std::string& worker_id, const std::string& reason, Effects& fx, bool requested,
                         std::vector<std::string> joining) {
  if (broken_ || generation_ == 0) return;
  broken_ = reason;
  broken_at_ = clock_.now();
  events_.push_back(
      {WorldEvent::Kind::kBroken, *broken_at_, generation_, {}, worker_id, reason, 0, requested, std::move(joining)});
  kv_.fail_all(api::conflict("generation " + std::to_string(generation_) + " broke: " + reason + "; join again"), fx);
}

void World::form_locked(Effects& fx) {
  if (round_.empty() || closed_) return;
  const TimePoint now = clock_.now();
  // a) Who must be there: the live members of the current generation (every
  // admitted worker before the first one).
  std::vector<std::string> missing;
  if (generation_ == 0 || lagged_) {
    for (const auto& [id, order] : admitted_) {
      if (!round_.count(id)) missing.push_back(id);
    }
  } else {
    for (const auto& id : members_) {
      if (admitted_.count(id) && !round_.count(id)) missing.push_back(id);
    }
  }
  // b) ... unless the generation broke long enough ago.
  const bool waited_enough =
      generation_ > 0 && broken_at_ && now >= *broken_at_ + options_.rejoin_timeout;
  if (!missing.empty() && !waited_enough) return;
  if (static_cast<int>(round_.size()) < options_.min_np) return;

  std::vector<std::string> next;
  for (const auto& id : members_) {
    if (round_.count(id)) next.push_back(id);
  }
  if (generation_ > 0 && next.empty()) {
    // Only newcomers: nobody would hold the training state. Wait while a
    // member may still come; the manager fails the cluster when none can.
    return;
  }
  std::vector<std::pair<uint64_t, std::string>> newcomers;
  for (const auto& [id, j] : round_) {
    if (!contains(members_, id)) newcomers.emplace_back(j.order, id);
  }
  std::sort(newcomers.begin(), newcomers.end());
  for (const auto& [order, id] : newcomers) {
    if (static_cast<int>(next.size()) >= options_.max_np) break;
    next.push_back(id);
  }

  for (const auto& id : missing) {
    const std::string why = "did not join generation " + std::to_string(generation_ + 1) + " within " +
                            seconds_text(std::chrono::duration<double>(options_.rejoin_timeout).count()) +
                            " s of generation " + std::to_string(generation_) + " breaking";
    events_.push_back({WorldEvent::Kind::kExcluded, now, generation_ + 1, {}, id, member_name_locked(id) + " " + why, 0});
    admitted_.erase(id);
    removed_[id] = why;
  }
  const int previous = generation_;
  generation_ += 1;
  members_ = next;
  broken_.reset();
  broken_at_.reset();
  restored_ = false;
  lagged_ = false;
  kv_.reset();
  kv_.fail_all(api::conflict("generation " + std::to_string(previous) + " is over: the world is at generation " +
                             std::to_string(generation_) + "; join again"),
               fx);
  for (const auto& id : members_) {
    auto it = round_.find(id);
    if (it->second.parked) {
      fx.push_back([done = std::move(*it->second.parked), a = assignment_locked(id)] { done(a); });
    }
    round_.erase(it);
  }
  events_.push_back({WorldEvent::Kind::kFormed, now, generation_, members_, "", "", 0});
  wake_watchers_locked(fx);
}

proto::Assignment World::assignment_locked(const std::string& worker_id) const {
  proto::Assignment a;
  a.ready = true;
  a.generation = generation_;
  a.rank = static_cast<int>(std::find(members_.begin(), members_.end(), worker_id) - members_.begin());
  a.size = static_cast<int>(members_.size());
  a.prefix = options_.cluster_id + "/" + std::to_string(generation_);
  return a;
}

proto::WorldView World::view_locked(int generation) const {
  proto::WorldView v;
  v.generation = generation_;
  v.size = static_cast<int>(members_.size());
  int newcomers = 0;
  for (const auto& [id, j] : round_) {
    if (!contains(members_, id)) ++newcomers;
  }
  v.waiting = newcomers;
  const bool room = static_cast<int>(members_.size()) < options_.max_np;
  v.changed = generation != generation_ || broken_.has_value() || (newcomers > 0 && room);
  return v;
}

void World::wake_watchers_locked(Effects& fx) {
  for (auto it = watchers_.begin(); it != watchers_.end();) {
    proto::WorldView v = view_locked(it->generation);
    if (!v.changed) {
      ++it;
      continue;
    }
    fx.push_back([done = std::move(it->done), v] { done(v); });
    it = watchers_.erase(it);
  }
}

// ---- The ranks' side.

void World::enter_round_locked(const std::string& worker_id, JoinDone done, Effects& fx) {
  Joiner& j = round_[worker_id];
  if (j.parked) fx.push_back([old = std::move(*j.parked)] { old(proto::Assignment{}); });  // a retried join
  j.order = admitted_.at(worker_id);
  j.parked = std::move(done);
  j.deadline = clock_.now() + options_.poll_bound;
  form_locked(fx);
  wake_watchers_locked(fx);
}

void World::join(const std::string& worker_id, const proto::JoinRequest& request, JoinDone done) {
  Effects fx;
  {
    std::lock_guard<std::mutex> lock(mu_);
    const int seen = request.generation;
    if (closed_) {
      fx.push_back([done, out = closed_locked()] { done(out); });
    } else if (!admitted_.count(worker_id)) {
      fx.push_back([done, out = outsider_locked(worker_id)] { done(out); });
    } else if (seen > generation_ && !restored_) {
      fx.push_back([done, out = unformed_locked(seen)] { done(out); });
    } else if (lagged_ || (restored_ && seen > generation_)) {
      if (seen > generation_) {
        events_.push_back({WorldEvent::Kind::kBroken, clock_.now(), seen, {}, worker_id,
                           "musterd restarted after generation " + std::to_string(seen) +
                               " formed and before it was saved (the daemon had recorded generation " +
                               std::to_string(generation_) + ")",
                           0});
        generation_ = seen;
        members_.clear();
        lagged_ = true;
        broken_ = "musterd restarted during generation " + std::to_string(seen);
        broken_at_ = clock_.now();
      }
      if (seen == generation_ && !contains(members_, worker_id)) members_.push_back(worker_id);
      enter_round_locked(worker_id, std::move(done), fx);
    } else if (contains(members_, worker_id) && seen < generation_) {
      fx.push_back([done, a = assignment_locked(worker_id)] { done(a); });  // its answer was lost: again
    } else if (seen > 0 && !contains(members_, worker_id)) {
      fx.push_back([done, out = api::conflict(
                              "worker " + worker_id + " is stale: it was in generation " + std::to_string(seen) +
                              ", and generation " + std::to_string(generation_) +
                              " formed without it; a rank that was left out cannot rejoin (its training state is "
                              "behind): end it, musterd starts a replacement")] { done(out); });
    } else {
      // Into the round for generation_ + 1. A member asking breaks its generation.
      if (contains(members_, worker_id)) {
        // Newcomers already waiting make it a join; else the member saw a
        // peer fail (whose death the manager may learn a moment later).
        std::vector<std::string> joining;
        for (const auto& [id, j] : round_) {
          if (!contains(members_, id)) joining.push_back(id);
        }
        std::string why = member_name_locked(worker_id) + " asked to form a new generation";
        if (!joining.empty()) {
          std::string names;
          for (const auto& id : joining) names += (names.empty() ? "" : ", ") + id;
          why = "replacement " + names + " is joining (" + why + ")";
        }
        break_locked(worker_id, why, fx, true, std::move(joining));
      }
      enter_round_locked(worker_id, std::move(done), fx);
    }
  }
  run(fx);
}

api::Status World::check_kv_locked(const std::string& worker_id, int generation) const {
  const std::string g = std::to_string(generation);
  if (closed_) return closed_locked();
  if (!admitted_.count(worker_id)) return outsider_locked(worker_id);
  if (generation < generation_) {
    return api::conflict("generation " + g + " is over: the world is at generation " + std::to_string(generation_) +
                         "; join again");
  }
  if (generation > generation_) {
    return api::conflict("generation " + g + " has not formed: the world is at generation " +
                         std::to_string(generation_));
  }
  if (!contains(members_, worker_id)) {
    return api::conflict("worker " + worker_id + " is not a member of generation " + g);
  }
  if (broken_) return api::conflict("generation " + g + " broke: " + *broken_ + "; join again");
  if (restored_) {
    return api::conflict("musterd restarted during generation " + g +
                         ", and its key-value exchange was lost with the earlier daemon; join again");
  }
  return api::Status::ok();
}

api::Status World::set(const std::string& worker_id, const proto::KvSet& request) {
  Effects fx;
  api::Status out;
  {
    std::lock_guard<std::mutex> lock(mu_);
    out = check_kv_locked(worker_id, request.generation);
    if (out) out = kv_.set(generation_, request.key, request.value, fx);
  }
  run(fx);
  return out;
}

void World::get(const std::string& worker_id, const proto::KvGet& request, GetDone done) {
  Effects fx;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (auto s = check_kv_locked(worker_id, request.generation); !s) {
      fx.push_back([done, s] { done(s); });
    } else {
      std::optional<TimePoint> until;
      if (request.timeout_ms > 0) {
        until = clock_.now() + std::min<std::chrono::milliseconds>(std::chrono::milliseconds(request.timeout_ms),
                                                                   options_.poll_bound);
      }
      kv_.get(worker_id, request.keys, until, std::move(done), fx);
    }
  }
  run(fx);
}

void World::world(const std::string& worker_id, int generation, std::chrono::milliseconds wait, WorldDone done) {
  Effects fx;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (closed_) {
      fx.push_back([done, out = closed_locked()] { done(out); });
    } else if (!admitted_.count(worker_id)) {
      fx.push_back([done, out = outsider_locked(worker_id)] { done(out); });
    } else {
      proto::WorldView v = view_locked(generation);
      if (v.changed || wait.count() <= 0) {
        fx.push_back([done, v] { done(v); });
      } else {
        watchers_.push_back({worker_id, generation, clock_.now() + std::min(wait, options_.poll_bound), std::move(done)});
      }
    }
  }
  run(fx);
}

api::Status World::report(const std::string& worker_id, const proto::Report& report) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!admitted_.count(worker_id)) return outsider_locked(worker_id);
  if (report.generation > generation_) return unformed_locked(report.generation);
  events_.push_back({WorldEvent::Kind::kReported, clock_.now(), report.generation, {}, worker_id, "",
                     report.batches_redone});
  return api::Status::ok();
}

// ---- State.

int World::generation() const {
  std::lock_guard<std::mutex> lock(mu_);
  return generation_;
}

std::vector<std::string> World::members() const {
  std::lock_guard<std::mutex> lock(mu_);
  return members_;
}

int World::joined() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int>(round_.size());
}

nlohmann::json World::to_record() const {
  std::lock_guard<std::mutex> lock(mu_);
  return {{"generation", generation_}, {"members", members_}};
}

void World::restore(const nlohmann::json& record) {
  std::lock_guard<std::mutex> lock(mu_);
  generation_ = record.value("generation", 0);
  members_ = record.value("members", std::vector<std::string>{});
  restored_ = true;  // whatever the record says, its KV is gone and it may lag
}

}  // namespace muster::service::elastic
