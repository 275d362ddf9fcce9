#include "service/elastic/generation_kv.h"

#include <algorithm>

namespace muster::service::elastic {

namespace proto = clusterspec::rendezvous;

api::Status GenerationKv::set(int generation, const std::string& key, const std::string& value, Effects& fx) {
  auto it = values_.find(key);
  if (it != values_.end()) {
    if (it->second == value) return api::Status::ok();  // a retried set
    return api::conflict("key '" + key + "' of generation " + std::to_string(generation) +
                         " was already written with another value (keys are written once)");
  }
  const size_t bytes = key.size() + value.size();
  if (bytes_ + bytes > max_bytes_) {
    return api::Status(api::ErrorCode::kPayloadTooLarge, "generation " + std::to_string(generation) +
                                                             " would hold more than " + std::to_string(max_bytes_) +
                                                             " bytes of keys and values");
  }
  values_[key] = value;
  bytes_ += bytes;
  wake(fx);
  return api::Status::ok();
}

void GenerationKv::get(const std::string& worker_id, const std::vector<std::string>& keys,
                       std::optional<TimePoint> until, GetDone done, Effects& fx) {
  proto::KvValues v;
  for (const auto& k : keys) {
    auto it = values_.find(k);
    if (it == values_.end()) {
      v.missing.push_back(k);
    } else {
      v.values.push_back(it->second);
    }
  }
  v.ready = v.missing.empty();
  if (!v.ready) v.values.clear();
  if (v.ready || !until) {
    fx.push_back([done = std::move(done), v = std::move(v)] { done(v); });
    return;
  }
  getters_.push_back({worker_id, keys, *until, std::move(done)});
}

void GenerationKv::wake(Effects& fx) {
  for (auto it = getters_.begin(); it != getters_.end();) {
    const bool all =
        std::all_of(it->keys.begin(), it->keys.end(), [&](const std::string& k) { return values_.count(k) > 0; });
    if (!all) {
      ++it;
      continue;
    }
    proto::KvValues v;
    v.ready = true;
    for (const auto& k : it->keys) v.values.push_back(values_.at(k));
    fx.push_back([done = std::move(it->done), v = std::move(v)] { done(v); });
    it = getters_.erase(it);
  }
}

void GenerationKv::expire(TimePoint now, Effects& fx) {
  for (auto it = getters_.begin(); it != getters_.end();) {
    if (now < it->deadline) {
      ++it;
      continue;
    }
    proto::KvValues v;
    for (const auto& k : it->keys) {
      if (!values_.count(k)) v.missing.push_back(k);
    }
    fx.push_back([done = std::move(it->done), v = std::move(v)] { done(v); });
    it = getters_.erase(it);
  }
}

void GenerationKv::fail_all(const api::Status& why, Effects& fx) {
  for (auto& g : getters_) fx.push_back([done = std::move(g.done), why] { done(why); });
  getters_.clear();
}

void GenerationKv::drop(const std::string& worker_id, const api::Status& why, Effects& fx) {
  for (auto it = getters_.begin(); it != getters_.end();) {
    if (it->worker_id != worker_id) {
      ++it;
      continue;
    }
    fx.push_back([done = std::move(it->done), why] { done(why); });
    it = getters_.erase(it);
  }
}

void GenerationKv::reset() {
  values_.clear();
  bytes_ = 0;
}

}  // namespace muster::service::elastic
