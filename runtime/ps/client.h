// SyncReplicasClient: the worker side of parameter-server training, with
// TensorFlow's SyncReplicasOptimizer semantics (see server.h, protocol.h).
//
// Each worker registers its variables (views of its own float32 memory),
// the chief initialises them on the PS tasks (from its values, or from the
// newest checkpoint), the others wait for that; then every step pushes the
// gradients and pulls the new parameters straight into the registered
// memory. `streams` TCP connections per PS task (2 by default; a slice
// always uses the same one); pushes and pulls to different PS tasks and
// connections run concurrently; the tensors are written and read in place.
//
// Usage:
//   #include "runtime/ps/client.h"
//   namespace ps = muster::runtime::ps;
//   ps::ClientOptions opt;
//   opt.optimizer = "momentum"; opt.learning_rate = 0.05f;
//   opt.checkpoint_dir = "ckpt"; opt.checkpoint_every = 100;   // chief only
//   ps::SyncReplicasClient client(ps::PsCluster::from_env(), opt);  // TF_CONFIG
//   client.register_variables({{"w1", w1.data(), w1.size()}, {"b1", b1.data(), b1.size()}});
//   int64_t step = client.initialize_or_wait();   // chief inits (or resumes), others wait
//   while (step < total_steps) {
//     compute_gradients(batch_for(step, client.worker_index()), dw1, db1);
//     step = client.step({dw1.data(), db1.data()});   // push, wait for the step, pull
//   }
//   client.done();    // chief writes the last checkpoint; PS tasks exit when all are done
//
// Stale gradients: with backup workers (replicas_to_aggregate <
// total_num_replicas) a worker's push for a step the others already
// completed is dropped, as in TensorFlow; stats() counts them from the PS
// tasks' answers (and muster-ps logs its total at exit).
//
// Errors: CommError naming the PS task ("ps task 1 (127.0.0.1:4001) closed
// the connection ...") when a PS dies; TimeoutError when nothing arrives
// within timeout_ms (e.g. a worker died and there are no backup workers).
// After an error the client is unusable. Not thread-safe: one thread per client.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "runtime/ps/checkpoint.h"
#include "runtime/ps/cluster.h"
#include "runtime/ps/options.h"
#include "runtime/ps/placement.h"
#include "runtime/ps/protocol.h"

namespace muster::runtime::ps {

class Links;  // links.h: the connections to the PS tasks

struct Variable {
  std::string name;
  float* value = nullptr;  // the worker's parameter memory; pulls write here
  std::size_t size = 0;    // elements
};

struct ClientOptions {
  int replicas_to_aggregate = 0;  // gradients averaged per step; 0: every worker
  int total_num_replicas = 0;     // workers in the job; 0: every worker of the cluster
  std::string optimizer = "sgd";  // applied on the PS: "sgd", "momentum", "adam"
  float learning_rate = 0.01f;
  Mode mode = Mode::kSync;        // kAsync: every push applied at once, no waiting
  std::string checkpoint_dir;     // chief: "" for no checkpoints
  int checkpoint_every = 0;       // chief: steps between checkpoints (0: only in done())
  int timeout_ms = default_timeout_ms();
  int socket_buffer_bytes = default_socket_buffer_bytes();
  int streams = default_streams();  // connections to each PS task (MUSTER_PS_STREAMS)
  std::string secret = default_secret();  // MUSTER_PS_SECRET: sent in every hello
  PlacementOptions placement;
};

struct ClientStats {
  uint64_t bytes_pushed = 0;
  uint64_t bytes_pulled = 0;
  int checkpoints_written = 0;
  uint64_t stale_dropped = 0;  // this worker's gradient slices the PS tasks dropped as stale
  uint64_t stale_steps = 0;    // steps of which at least one gradient slice was dropped
  std::string last_checkpoint;
};

class SyncReplicasClient {
 public:
  SyncReplicasClient(PsCluster cluster, ClientOptions options);
  ~SyncReplicasClient();
  SyncReplicasClient(const SyncReplicasClient&) = delete;
  SyncReplicasClient& operator=(const SyncReplicasClient&) = delete;

  // Same names and sizes, in the same order, on every worker.
  void register_variables(std::vector<Variable> variables);
  // Connects to every PS; the chief initialises the variables (resuming
  // from the newest checkpoint in checkpoint_dir if there is one), every
  // worker then pulls them. Returns the global step to start from.
  int64_t initialize_or_wait();
  // Pushes one gradient per registered variable (same order and sizes),
  // computed at local step `step`.
  void push_gradients(int64_t step, const std::vector<const float*>& grads);
  // Pulls every variable once its global step is >= min_step; returns the
  // new global step. Sync mode: every slice is then at that same step.
  int64_t pull(int64_t min_step);
  // push_gradients(global_step()) and pull(global_step() + 1) in one round
  // (async mode: pull whatever is current). The chief checkpoints every
  // checkpoint_every steps. Returns the new global step.
  int64_t step(const std::vector<const float*>& grads);
  // The chief writes a checkpoint now: the values and the optimizer's state
  // (TensorFlow's slot variables, fetched from the PS tasks). Returns its path.
  std::string save_checkpoint();
  // Tells every PS this worker has finished (the chief checkpoints first).
  void done();

  int64_t global_step() const { return global_step_; }
  int worker_index() const { return cluster_.worker_index(); }
  bool is_chief() const { return cluster_.is_chief(); }
  const Placement& placement() const { return placement_; }
  const ClientStats& stats() const { return stats_; }

 private:
  void check_gradient_count(const std::vector<const float*>& grads) const;
  void maybe_checkpoint();
  void count_stale(uint64_t total);
  // Sync mode, after a pull answered at steps oldest..newest (oldest <
  // newest): pulls again until every slice is at one step; returns it.
  int64_t pull_one_step(int64_t oldest, int64_t newest);
  // The same for a worker's first pull, without waiting on the PS and for a
  // bounded time (client.cc says why); then the oldest step.
  int64_t first_step(int64_t oldest, int64_t newest);
  std::size_t optimizer_slots() const;
  std::vector<std::vector<const float*>> restore(const LoadedCheckpoint& c);

  PsCluster cluster_;
  ClientOptions options_;
  std::vector<Variable> variables_;
  Placement placement_;
  std::unique_ptr<Links> links_;
  int64_t global_step_ = 0;
  int64_t last_saved_step_ = -1;
  bool done_ = false;
  ClientStats stats_;
};

}  // namespace muster::runtime::ps
