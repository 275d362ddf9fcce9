#include "runtime/elastic/state.h"

#include <algorithm>

namespace muster::runtime::elastic {

void State::set_buffers(std::vector<Buffer> buffers) { buffers_ = std::move(buffers); }

void State::set_counter(const std::string& name, int64_t* value) {
  for (auto& [n, p] : counters_) {
    if (n == name) {
      p = value;
      return;
    }
  }
  counters_.emplace_back(name, value);
}

void State::attach(distributed::Collectives* collectives, Membership* membership) {
  collectives_ = collectives;
  membership_ = membership;
}

void State::copy_into(Copies& out) const {
  for (const auto& b : buffers_) {
    auto& copy = out[b.name];
    copy.resize(b.count);  // no allocation after the first time for the same size
    std::copy(b.data, b.data + b.count, copy.begin());
  }
}

State::Copies State::snapshot() const {
  Copies out;
  copy_into(out);
  return out;
}

void State::save() {
  copy_into(committed_);
  for (const auto& [name, p] : counters_) committed_counters_[name] = *p;
}

void State::load(const Copies& copies) {
  for (const auto& b : buffers_) {
    auto it = copies.find(b.name);
    if (it == copies.end()) continue;  // a buffer the copies do not know keeps its value
    if (it->second.size() != b.count) {
      throw InvalidArgument("elastic state: buffer '" + b.name + "' has " + std::to_string(b.count) +
                            " elements, its copy " + std::to_string(it->second.size()));
    }
    std::copy(it->second.begin(), it->second.end(), b.data);
  }
}

void State::restore() {
  load(committed_);
  for (auto& [name, p] : counters_) {
    auto it = committed_counters_.find(name);
    if (it != committed_counters_.end()) *p = it->second;
  }
  steps_since_commit_ = 0;
}

void State::commit() {
  save();
  steps_since_commit_ = 0;
  check_host_updates();
}

void State::check_host_updates() {
  if (!collectives_) return;
  int64_t flags[2] = {0, 0};
  if (collectives_->rank() == 0 && membership_) {
    bool newcomers = false;
    if (membership_->changed(&newcomers)) {
      flags[0] = 1;
      flags[1] = newcomers ? 0 : 1;
    }
  }
  if (collectives_->size() > 1) collectives_->broadcast(flags, 2, DataType::kInt64, 0);
  if (flags[0]) throw HostsUpdatedInterrupt(flags[1] != 0);
}

void State::sync() {
  if (!collectives_ || collectives_->size() == 1) return;
  for (const auto& b : buffers_) collectives_->broadcast(b.data, b.count, DataType::kFloat32, 0);
  for (const auto& [name, p] : counters_) collectives_->broadcast(p, 1, DataType::kInt64, 0);
}

void State::step_done() {
  ++steps_since_commit_;
  if (next_step_) {
    auto f = std::move(next_step_);
    next_step_ = nullptr;
    f();
  }
}

}  // namespace muster::runtime::elastic
