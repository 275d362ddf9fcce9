#include "runtime/ps/client.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <limits>
#include <thread>

#include <spdlog/spdlog.h>

#include "runtime/error.h"
#include "runtime/optim/optimizer.h"
#include "runtime/ps/checkpoint.h"
#include "runtime/ps/links.h"

namespace muster::runtime::ps {
namespace {

// The frame of `op` for slice `s`; with `data`, its float32 payload (the
// slice's size, read in place from there).
Outgoing slice_frame(Op op, const SliceSpec& s, int64_t step, const float* data = nullptr) {
  Outgoing o;
  o.header.op = op;
  o.header.slice = s.id;
  o.header.step = step;
  if (data != nullptr) {
    o.header.dtype = static_cast<uint8_t>(DataType::kFloat32);
    o.header.length = s.size * sizeof(float);
    o.data = data;
  }
  return o;
}

// One round trip to every PS task: the frames to send and the replies to read,
// per task. Pushes and pulls of one round go out in one gather write per PS.
struct Round {
  explicit Round(std::size_t n_ps) : out(n_ps), in(n_ps) {}

  // A push of every slice's gradient, for the worker's local `step`.
  void add_pushes(const Placement& placement, const std::vector<const float*>& grads, int64_t step,
                  ClientStats& stats) {
    for (const auto& s : placement.slices) {
      Outgoing o = slice_frame(Op::kPush, s, step, grads[s.variable] + s.offset);
      out[s.ps].push_back(o);
      stats.bytes_pushed += o.header.length;
    }
  }

  // A pull of every slice into the variables, answered once the slice's
  // global step is at least `min_step`. `stats` may be null (not counted).
  void add_pulls(const Placement& placement, const std::vector<Variable>& variables, int64_t min_step,
                 ClientStats* stats) {
    for (const auto& s : placement.slices) {
      out[s.ps].push_back(slice_frame(Op::kPull, s, min_step));
      in[s.ps].push_back({s.id, variables[s.variable].value + s.offset, s.size, 0});
      if (stats) stats->bytes_pulled += s.size * sizeof(float);
    }
  }

  // This worker's stale pushes so far, summed over the PS tasks (each
  // answer carries its connection's running count).
  uint64_t stale() const {
    uint64_t total = 0;
    for (const auto& v : in) {
      uint32_t n = 0;
      for (const auto& e : v) n = std::max(n, e.aux);
      total += n;
    }
    return total;
  }

  // The smallest global step the PS tasks answered the pulls with.
  int64_t min_step() const {
    int64_t step = std::numeric_limits<int64_t>::max();
    for (const auto& v : in) {
      for (const auto& e : v) step = std::min(step, e.step);
    }
    return step;
  }

  // The largest global step the PS tasks answered the pulls with.
  int64_t max_step() const {
    int64_t step = std::numeric_limits<int64_t>::min();
    for (const auto& v : in) {
      for (const auto& e : v) step = std::max(step, e.step);
    }
    return step;
  }

  std::vector<std::vector<Outgoing>> out;
  std::vector<std::vector<Expected>> in;
};

}  // namespace

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
  if (options_.secret.size() > kMaxSecretBytes) {
    throw InvalidArgument("ps client: the secret (MUSTER_PS_SECRET) is longer than " + std::to_string(kMaxSecretBytes) + " bytes");
  }
  if (options_.streams < 1 || options_.streams > static_cast<int>(kMaxStreams)) {
    throw InvalidArgument("ps client: streams per PS task (MUSTER_PS_STREAMS) must be 1.." + std::to_string(kMaxStreams) +
                          ", got " + std::to_string(options_.streams));
  }
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
  hello.secret = options_.secret;
  // options_.streams connections to each PS task, but no more than it has
  // slices: every connection then carries some, and the chief's (a frame
  // after its inits on each) seal the slice set (protocol.h).
  std::vector<int> streams(cluster_.ps.size(), 0);
  for (const auto& s : placement_.slices) ++streams[static_cast<std::size_t>(s.ps)];
  for (auto& n : streams) n = std::max(1, std::min(n, options_.streams));
  links_->connect_all(hello, streams);

  Round round(cluster_.ps.size());
  LoadedCheckpoint ckpt;                           // keeps the optimizer state alive until sent
  std::vector<std::vector<const float*>> slots;    // per variable: its optimizer state buffers
  if (is_chief()) {
    int64_t start = 0;
    if (!options_.checkpoint_dir.empty()) {
      if (auto path = newest_checkpoint(options_.checkpoint_dir)) {
        ckpt = load_checkpoint(*path);
        slots = restore(ckpt);
        start = ckpt.step;
        last_saved_step_ = ckpt.step;
        spdlog::info("chief: resuming from {} (global step {}{})", *path, ckpt.step,
                     slots.empty() ? "" : ", with the optimizer's state");
      }
    }
    for (const auto& s : placement_.slices) {
      Outgoing o = slice_frame(Op::kInit, s, start, variables_[s.variable].value + s.offset);
      if (!slots.empty() && !slots[s.variable].empty()) {
        o.header.aux = static_cast<uint32_t>(slots[s.variable].size());
        o.header.length *= 1 + slots[s.variable].size();
        o.more.emplace_back(o.data, s.size * sizeof(float));
        for (const float* slot : slots[s.variable]) o.more.emplace_back(slot + s.offset, s.size * sizeof(float));
      }
      round.out[s.ps].push_back(o);
    }
  }
  round.add_pulls(placement_, variables_, 0, nullptr);
  links_->exchange(round.out, round.in, "initialisation (pull of the chief's initial values)");
  global_step_ = first_step(round.min_step(), round.max_step());
  return global_step_;
}

// A worker's first pull, when the slices answered from two steps: a worker
// that starts while the others are mid-step (a late thread, a backup worker:
// replicas_to_aggregate < total_num_replicas lets the others go on without
// it) sees some slices already at the next step. A gradient computed from
// that mix and pushed for the older step would be accepted by the lagging
// slices as one of that step's replicas: a wrong result, silently (seen in
// about 1 run in 100 of PsSync.BackupWorkersLetTrainingGoOnWhenAWorkerDies).
// So pull again, without waiting on the PS, until the slices agree.
//
// It does not wait for them indefinitely, as pull_one_step() does: after a
// worker died midway through pushing a step (a replacement's case), the
// slices its push reached advance once the others push; the rest wait for
// one more gradient of that step, which no live worker sends, as each waits
// for the slices to agree, until the PS timeout fails the job. A view that
// stays torn for kTornViewGrace is that case: the worker then takes the
// oldest step, and its first gradient becomes one of that step's replicas
// on the slices still at it, and stale (dropped) on the others.
int64_t SyncReplicasClient::first_step(int64_t oldest, int64_t newest) {
  constexpr auto kTornViewGrace = std::chrono::seconds(2);
  constexpr auto kRetryPause = std::chrono::milliseconds(2);
  const auto give_up = std::chrono::steady_clock::now() + kTornViewGrace;
  while (options_.mode == Mode::kSync && oldest != newest && std::chrono::steady_clock::now() < give_up) {
    std::this_thread::sleep_for(kRetryPause);
    Round round(cluster_.ps.size());
    round.add_pulls(placement_, variables_, 0, nullptr);
    links_->exchange(round.out, round.in, "initialisation (a pull the slices agree on)");
    oldest = round.min_step();
    newest = round.max_step();
  }
  if (oldest != newest) {
    spdlog::warn("ps client: the slices stayed at steps {} to {} for {} s after this worker's first pull (a worker "
                 "died midway through a step?): starting at step {}",
                 oldest, newest, std::chrono::duration_cast<std::chrono::seconds>(kTornViewGrace).count(), oldest);
  }
  return oldest;
}

void SyncReplicasClient::check_gradient_count(const std::vector<const float*>& grads) const {
  if (grads.size() != variables_.size()) {
    throw InvalidArgument("ps client: " + std::to_string(grads.size()) + " gradients for " +
                          std::to_string(variables_.size()) + " variables");
  }
}

void SyncReplicasClient::push_gradients(int64_t step, const std::vector<const float*>& grads) {
  check_gradient_count(grads);
  Round round(cluster_.ps.size());
  round.add_pushes(placement_, grads, step, stats_);
  links_->exchange(round.out, round.in, "push of step " + std::to_string(step));
}

int64_t SyncReplicasClient::pull(int64_t min_step) {
  Round round(cluster_.ps.size());
  round.add_pulls(placement_, variables_, min_step, &stats_);
  links_->exchange(round.out, round.in, "pull of step " + std::to_string(min_step));
  count_stale(round.stale());
  global_step_ = pull_one_step(round.min_step(), round.max_step());
  return global_step_;
}

// The PS tasks answer a pull independently: when another worker's step has
// landed on one task and not yet on another, the slices come back from two
// steps. A gradient computed from such a mix and pushed for the older step
// would be accepted by the lagging slices and averaged into that step, so in
// sync mode pull again, waiting for the newest step seen, until they agree
// (not at a worker's first pull: see initialize_or_wait).
int64_t SyncReplicasClient::pull_one_step(int64_t oldest, int64_t newest) {
  while (options_.mode == Mode::kSync && oldest != newest) {
    Round round(cluster_.ps.size());
    round.add_pulls(placement_, variables_, newest, &stats_);
    links_->exchange(round.out, round.in, "pull of step " + std::to_string(newest));
    count_stale(round.stale());
    oldest = round.min_step();
    newest = round.max_step();
  }
  return oldest;
}

int64_t SyncReplicasClient::step(const std::vector<const float*>& grads) {
  check_gradient_count(grads);
  const int64_t local = global_step_;
  const int64_t want = options_.mode == Mode::kSync ? local + 1 : 0;
  Round round(cluster_.ps.size());
  round.add_pushes(placement_, grads, local, stats_);  // every push first, then every pull
  round.add_pulls(placement_, variables_, want, &stats_);
  links_->exchange(round.out, round.in, "step " + std::to_string(local));
  count_stale(round.stale());
  global_step_ = pull_one_step(round.min_step(), round.max_step());
  maybe_checkpoint();
  return global_step_;
}

void SyncReplicasClient::count_stale(uint64_t total) {
  if (total > stats_.stale_dropped) {
    ++stats_.stale_steps;
    stats_.stale_dropped = total;
  }
}

void SyncReplicasClient::maybe_checkpoint() {
  if (!is_chief() || options_.checkpoint_dir.empty() || options_.checkpoint_every <= 0) return;
  if (global_step_ % options_.checkpoint_every == 0 && global_step_ != last_saved_step_) save_checkpoint();
}

std::size_t SyncReplicasClient::optimizer_slots() const {
  auto probe = optim::make_optimizer(options_.optimizer, options_.learning_rate);
  probe->init({1});
  return probe->state().size();
}

// Checkpoint entries are each variable followed by its optimizer state
// buffers, named "<variable>/slot<k>" (TensorFlow's slot variables).
std::vector<std::vector<const float*>> SyncReplicasClient::restore(const LoadedCheckpoint& c) {
  const std::size_t n_slots = optimizer_slots();
  std::vector<std::vector<const float*>> slots(variables_.size());
  std::size_t k = 0;
  bool any_slots = false;
  for (std::size_t i = 0; i < variables_.size(); ++i, ++k) {
    if (k >= c.names.size() || c.names[k] != variables_[i].name || c.values[k].size() != variables_[i].size) {
      throw DataError("checkpoint " + c.path + " does not match the model at variable '" + variables_[i].name + "' (" +
                      std::to_string(variables_[i].size) + " elements)" +
                      (k < c.names.size() ? ": found '" + c.names[k] + "' (" + std::to_string(c.values[k].size()) + ")" : ""));
    }
    std::copy(c.values[k].begin(), c.values[k].end(), variables_[i].value);
    for (std::size_t j = 0; k + 1 < c.names.size() && c.names[k + 1] == variables_[i].name + "/slot" + std::to_string(j); ++j) {
      ++k;
      if (c.values[k].size() != variables_[i].size) throw DataError("checkpoint " + c.path + ": bad size of " + c.names[k]);
      slots[i].push_back(c.values[k].data());
    }
    if (!slots[i].empty()) any_slots = true;
    if (!slots[i].empty() && slots[i].size() != n_slots) {
      throw DataError("checkpoint " + c.path + " holds " + std::to_string(slots[i].size()) + " optimizer state buffers for '" +
                      variables_[i].name + "'; optimizer " + options_.optimizer + " uses " + std::to_string(n_slots));
    }
  }
  if (k != c.names.size()) throw DataError("checkpoint " + c.path + " has variables the model does not have");
  if (!any_slots) slots.clear();
  return slots;
}

std::string SyncReplicasClient::save_checkpoint() {
  if (options_.checkpoint_dir.empty()) throw InvalidArgument("ps client: no checkpoint_dir set");
  const std::size_t n_slots = optimizer_slots();
  std::vector<std::vector<float>> data(variables_.size() * (1 + n_slots));  // variable i: [i*(1+n)] values, then slots
  for (std::size_t i = 0; i < variables_.size(); ++i) {
    for (std::size_t j = 0; j <= n_slots; ++j) data[i * (1 + n_slots) + j].resize(variables_[i].size);
  }
  int64_t step = global_step_;
  if (n_slots > 0) {  // the optimizer's state lives on the PS tasks: fetch it with the values
    Round round(cluster_.ps.size());
    std::vector<std::vector<float>> per_slice(placement_.slices.size());
    for (const auto& s : placement_.slices) {
      round.out[s.ps].push_back(slice_frame(Op::kPullState, s, 0));
      per_slice[s.id].resize(s.size * (1 + n_slots));
      Expected e;
      e.slice = s.id;
      e.dst = per_slice[s.id].data();
      e.count = per_slice[s.id].size();
      e.op = Op::kState;
      round.in[s.ps].push_back(e);
    }
    links_->exchange(round.out, round.in, "checkpoint (pull of values and optimizer state)");
    step = std::min(step, round.min_step());
    for (const auto& s : placement_.slices) {
      for (std::size_t j = 0; j <= n_slots; ++j) {
        const float* src = per_slice[s.id].data() + j * s.size;
        std::copy(src, src + s.size, data[s.variable * (1 + n_slots) + j].data() + s.offset);
      }
    }
  }
  std::vector<CheckpointEntry> entries;
  for (std::size_t i = 0; i < variables_.size(); ++i) {
    const auto& v = variables_[i];
    entries.push_back({v.name, n_slots > 0 ? data[i * (1 + n_slots)].data() : v.value, v.size});
    for (std::size_t j = 1; j <= n_slots; ++j) {
      entries.push_back({v.name + "/slot" + std::to_string(j - 1), data[i * (1 + n_slots) + j].data(), v.size});
    }
  }
  std::string path = ps::save_checkpoint(options_.checkpoint_dir, step, entries);
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
