#include "muster/runtime/ps/client.h"

#include <algorithm>
#include <limits>

#include <spdlog/spdlog.h>

#include "muster/runtime/error.h"
#include "muster/runtime/ps/checkpoint.h"
#include "muster/runtime/ps/links.h"

namespace muster::runtime::ps {

class SyncReplicasClient::Links : public ps::Links {
 public:
  using ps::Links::Links;
};

SyncReplicasClient::SyncReplicasClient(PsCluster cluster, ClientOptions options)
    : cluster_(std::move(cluster)), options_(std::move(options)) {
  if (cluster_.ps.empty()) throw InvalidArgument("ps client: the cluster has no ps tasks");
  if (cluster_.worker_index() < 0) {
    throw InvalidArgument("ps client: task " + cluster_.task_type + " " + std::to_string(cluster_.task_index) +
                          " is not a worker or chief");
  }
  const int n = std::max(1, cluster_.num_workers());
  if (options_.total_num_replicas <= 0) options_.total_num_replicas = n;
  if (options_.replicas_to_aggregate <= 0) options_.replicas_to_aggregate = options_.total_num_replicas;
  if (options_.replicas_to_aggregate > options_.total_num_replicas) {
    throw InvalidArgument("ps client: replicas_to_aggregate " + std::to_string(options_.replicas_to_aggregate) +
                          " > total_num_replicas " + std::to_string(options_.total_num_replicas));
  }
  if (options_.optimizer.size() >= kOptimizerNameBytes) throw InvalidArgument("ps client: optimizer name too long");
  links_ = std::make_unique<Links>(cluster_.ps, options_.timeout_ms, options_.socket_buffer_bytes);
}

SyncReplicasClient::~SyncReplicasClient() = default;

void SyncReplicasClient::register_variables(std::vector<Variable> variables) {
  std::vector<VariableSpec> specs;
  for (const auto& v : variables) {
    if (v.value == nullptr || v.size == 0) throw InvalidArgument("ps client: variable '" + v.name + "' has no memory");
    specs.push_back({v.name, v.size});
  }
  variables_ = std::move(variables);
  placement_ = place(specs, static_cast<int>(cluster_.ps.size()), options_.placement);
}

int64_t SyncReplicasClient::initialize_or_wait() {
  if (variables_.empty()) throw InvalidArgument("ps client: register_variables() before initialize_or_wait()");
  HelloPayload hello;
  hello.worker_index = static_cast<uint32_t>(worker_index());
  hello.replicas_to_aggregate = static_cast<uint32_t>(options_.replicas_to_aggregate);
  hello.total_num_replicas = static_cast<uint32_t>(options_.total_num_replicas);
  hello.mode = options_.mode;
  hello.learning_rate = options_.learning_rate;
  hello.optimizer = options_.optimizer;
  links_->connect_all(hello);

  const std::size_t n_ps = cluster_.ps.size();
  std::vector<std::vector<Outgoing>> out(n_ps);
  if (is_chief()) {
    int64_t start = 0;
    if (!options_.checkpoint_dir.empty()) {
      if (auto path = newest_checkpoint(options_.checkpoint_dir)) {
        LoadedCheckpoint c = load_checkpoint(*path);
        if (c.names.size() != variables_.size()) {
          throw DataError("checkpoint " + *path + " has " + std::to_string(c.names.size()) + " variables, the model " +
                          std::to_string(variables_.size()));
        }
        for (std::size_t i = 0; i < variables_.size(); ++i) {
          if (c.names[i] != variables_[i].name || c.values[i].size() != variables_[i].size) {
            throw DataError("checkpoint " + *path + ": variable " + std::to_string(i) + " is '" + c.names[i] + "' (" +
                            std::to_string(c.values[i].size()) + " elements), the model has '" + variables_[i].name +
                            "' (" + std::to_string(variables_[i].size) + ")");
          }
          std::copy(c.values[i].begin(), c.values[i].end(), variables_[i].value);
        }
        start = c.step;
        last_saved_step_ = c.step;
        spdlog::info("chief: resuming from {} (global step {})", *path, c.step);
      }
    }
    for (const auto& s : placement_.slices) {
      Outgoing o;
      o.header.op = Op::kInit;
      o.header.dtype = static_cast<uint8_t>(DataType::kFloat32);
      o.header.slice = s.id;
      o.header.step = start;
      o.header.length = s.size * sizeof(float);
      o.data = variables_[s.variable].value + s.offset;
      out[s.ps].push_back(o);
    }
  }
  std::vector<std::vector<Expected>> in(n_ps);
  for (const auto& s : placement_.slices) {
    Outgoing o;
    o.header.op = Op::kPull;
    o.header.slice = s.id;
    o.header.step = 0;
    out[s.ps].push_back(o);
    in[s.ps].push_back({s.id, variables_[s.variable].value + s.offset, s.size, 0});
  }
  links_->exchange(out, in, "initialisation (pull of the chief's initial values)");
  int64_t step = std::numeric_limits<int64_t>::max();
  for (const auto& v : in) {
    for (const auto& e : v) step = std::min(step, e.step);
  }
  global_step_ = step;
  return global_step_;
}

void SyncReplicasClient::push_gradients(int64_t step, const std::vector<const float*>& grads) {
  if (grads.size() != variables_.size()) {
    throw InvalidArgument("ps client: " + std::to_string(grads.size()) + " gradients for " +
                          std::to_string(variables_.size()) + " variables");
  }
  std::vector<std::vector<Outgoing>> out(cluster_.ps.size());
  std::vector<std::vector<Expected>> in(cluster_.ps.size());
  for (const auto& s : placement_.slices) {
    Outgoing o;
    o.header.op = Op::kPush;
    o.header.dtype = static_cast<uint8_t>(DataType::kFloat32);
    o.header.slice = s.id;
    o.header.step = step;
    o.header.length = s.size * sizeof(float);
    o.data = grads[s.variable] + s.offset;
    out[s.ps].push_back(o);
    stats_.bytes_pushed += o.header.length;
  }
  links_->exchange(out, in, "push of step " + std::to_string(step));
}

int64_t SyncReplicasClient::pull(int64_t min_step) {
  std::vector<std::vector<Outgoing>> out(cluster_.ps.size());
  std::vector<std::vector<Expected>> in(cluster_.ps.size());
  for (const auto& s : placement_.slices) {
    Outgoing o;
    o.header.op = Op::kPull;
    o.header.slice = s.id;
    o.header.step = min_step;
    out[s.ps].push_back(o);
    in[s.ps].push_back({s.id, variables_[s.variable].value + s.offset, s.size, 0});
    stats_.bytes_pulled += s.size * sizeof(float);
  }
  links_->exchange(out, in, "pull of step " + std::to_string(min_step));
  int64_t step = std::numeric_limits<int64_t>::max();
  for (const auto& v : in) {
    for (const auto& e : v) step = std::min(step, e.step);
  }
  global_step_ = step;
  return step;
}

int64_t SyncReplicasClient::step(const std::vector<const float*>& grads) {
  if (grads.size() != variables_.size()) {
    throw InvalidArgument("ps client: " + std::to_string(grads.size()) + " gradients for " +
                          std::to_string(variables_.size()) + " variables");
  }
  const int64_t local = global_step_;
  const int64_t want = options_.mode == Mode::kSync ? local + 1 : 0;
  std::vector<std::vector<Outgoing>> out(cluster_.ps.size());
  std::vector<std::vector<Expected>> in(cluster_.ps.size());
  for (const auto& s : placement_.slices) {  // every push first, then every pull
    Outgoing o;
    o.header.op = Op::kPush;
    o.header.dtype = static_cast<uint8_t>(DataType::kFloat32);
    o.header.slice = s.id;
    o.header.step = local;
    o.header.length = s.size * sizeof(float);
    o.data = grads[s.variable] + s.offset;
    out[s.ps].push_back(o);
    stats_.bytes_pushed += o.header.length;
  }
  for (const auto& s : placement_.slices) {
    Outgoing o;
    o.header.op = Op::kPull;
    o.header.slice = s.id;
    o.header.step = want;
    out[s.ps].push_back(o);
    in[s.ps].push_back({s.id, variables_[s.variable].value + s.offset, s.size, 0});
    stats_.bytes_pulled += s.size * sizeof(float);
  }
  links_->exchange(out, in, "step " + std::to_string(local));
  int64_t step = std::numeric_limits<int64_t>::max();
  for (const auto& v : in) {
    for (const auto& e : v) step = std::min(step, e.step);
  }
  global_step_ = step;
  maybe_checkpoint();
  return global_step_;
}

void SyncReplicasClient::maybe_checkpoint() {
  if (!is_chief() || options_.checkpoint_dir.empty() || options_.checkpoint_every <= 0) return;
  if (global_step_ % options_.checkpoint_every == 0 && global_step_ != last_saved_step_) save_checkpoint();
}

std::string SyncReplicasClient::save_checkpoint() {
  if (options_.checkpoint_dir.empty()) throw InvalidArgument("ps client: no checkpoint_dir set");
  std::vector<CheckpointEntry> entries;
  for (const auto& v : variables_) entries.push_back({v.name, v.value, v.size});
  std::string path = ps::save_checkpoint(options_.checkpoint_dir, global_step_, entries);
  last_saved_step_ = global_step_;
  ++stats_.checkpoints_written;
  stats_.last_checkpoint = path;
  return path;
}

void SyncReplicasClient::done() {
  if (done_) return;
  done_ = true;
  if (is_chief() && !options_.checkpoint_dir.empty() && global_step_ != last_saved_step_) save_checkpoint();
  links_->send_done(static_cast<uint32_t>(worker_index()));
}

}  // namespace muster::runtime::ps
