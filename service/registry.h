// WorkerRegistry: every worker this daemon knows, its state machine, and the
// server side of await.
//
// Data path: routes (worker_routes.cc, agent_routes.cc) validate a request
// and call one method here; the registry updates its records under one mutex,
// persists them to the Store, and asks the Backend to start or stop agents.
// Agents report back (register / heartbeat / exit) through the agent routes,
// which land in the agent_* methods.
//
// Threads: any method may be called from any thread (the HTTP handler pool). Nothing
// here blocks waiting for a worker: await_workers() and agent_wait_release()
// take a callback that is called once, later, from whichever thread makes the
// awaited change (or from tick() at the deadline). Callbacks, subscriber
// notifications and backend stops always run outside the registry's mutex.
// Backend polls run outside the mutex too (a container teardown takes
// seconds). The daemon calls tick() every ~100 ms from one thread: it applies the
// startup and heartbeat timeouts, notices agents that died, and ends awaits
// at their deadline. Time comes only from the injected Clock, so unit tests
// drive every timeout with a FakeClock and a fake Backend.
//
// For clusters (service/cluster_*.cc): launch() takes a cluster_id and
// per-worker extras (env, hold, reserve_port); a held worker's agent
// registers (status running, ip and reserved port known) and then waits
// until release() hands it env and files; subscribe() reports every status
// change; stop() ends workers.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <filesystem>
#include <functional>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "api/status.h"
#include "api/worker.h"
#include "service/clock.h"
#include "service/gpu_inventory.h"
#include "service/store.h"
#include "workers/backend.h"

namespace muster::service {

struct RegistryOptions {
  std::filesystem::path state_dir;    // worker dirs: <state_dir>/workers/<id>/
  std::filesystem::path project_dir;  // MUSTER_PROJECT_DIR of every worker
  std::filesystem::path agent_path;   // muster-agent (tests may substitute)
  std::string agent_url;              // MUSTER_URL: http://<backend master address>:<port>
  std::string master_ip;              // MUSTER_MASTER_IP
  std::chrono::milliseconds startup_timeout{60'000};
  std::chrono::milliseconds heartbeat_timeout{10'000};
  std::chrono::milliseconds heartbeat_interval{2'000};
  std::chrono::milliseconds stop_grace{3'000};
  std::chrono::milliseconds release_poll{25'000};  // wait-release long-poll bound
  // Called (under the registry's mutex: it must only record) with the time
  // between two heartbeats of one worker, for /metrics.
  std::function<void(double seconds)> on_heartbeat_gap;
  // A worker's metrics token (service/auth.h), given to its script as
  // MUSTER_METRICS_TOKEN; unset: none is given.
  std::function<std::string(const std::string& worker_id)> metrics_token;
  // Stops caused by timeouts run on a registry thread (true) or inline in
  // tick() (false: unit tests with a fake backend).
  bool async_stops = true;
  // The host's GPUs (musterd --gpus / nvidia-smi). Null: none, so a launch
  // with nvidia_gpu > 0 is refused (409). A worker with nvidia_gpu=k gets k
  // devices (CUDA_VISIBLE_DEVICES / NVIDIA_VISIBLE_DEVICES, the worker's
  // gpu_devices) until it ends; a restarted daemon takes back the devices of
  // the workers it adopts.
  GpuInventory* gpus = nullptr;
};

// Per-worker additions of a launch (clusters).
struct WorkerExtras {
  std::map<std::string, std::string> env;  // added after the request's env
  bool hold = false;          // the agent registers, then waits for release()
  bool reserve_port = false;  // the agent reserves a TCP port on its IP and reports it
};

struct LaunchBatch {
  api::LaunchRequest request;
  std::optional<std::string> cluster_id;
  std::vector<WorkerExtras> per_worker;  // empty, or one per worker (request.n)
};

// What a held worker's agent receives: env added to the script's, and files
// written (atomically) into the worker's working directory.
struct Release {
  std::map<std::string, std::string> env;
  std::map<std::string, std::string> files;  // file name (no '/') -> content
};

struct AwaitResult {
  std::vector<api::Worker> workers;   // succeeded, in request order
  std::vector<api::Worker> failures;  // failed or still pending at the deadline
};

class WorkerRegistry {
 public:
  using AwaitCallback = std::function<void(AwaitResult)>;
  using ReleaseCallback = std::function<void(std::optional<Release>)>;  // nullopt: poll again
  using Listener = std::function<void(const api::Worker&)>;

  // `store` may be null (tests); the backend, store and clock outlive this.
  WorkerRegistry(RegistryOptions options, workers::Backend& backend, Store* store, const Clock& clock);
  ~WorkerRegistry();
  WorkerRegistry(const WorkerRegistry&) = delete;
  WorkerRegistry& operator=(const WorkerRegistry&) = delete;

  // Loads the workers of an earlier daemon: finished ones stay as they were;
  // starting/running ones wait for their agents (timeouts count from now).
  api::Status restore();

  // All-or-nothing: on error no worker of the batch exists.
  api::Result<std::vector<api::Worker>> launch(const LaunchBatch& batch);
  std::vector<api::Worker> list() const;
  api::Result<api::Worker> get(const std::string& id) const;
  api::Result<std::filesystem::path> log_path(const std::string& id) const;

  // Calls `done` once every worker settled (see api/openapi.yaml) or at the
  // deadline. Unknown ids: returns not_found and never calls `done`.
  api::Status await_workers(const api::AwaitRequest& request, AwaitCallback done);
  // Empty ids: every worker that has not finished. Returns the named workers
  // (their final objects) once their processes are gone.
  api::Result<std::vector<api::Worker>> stop(const std::vector<std::string>& ids);

  // Agent calls; each is authorised for `id` already.
  api::Result<bool> agent_register(const std::string& id, const std::string& ip, std::optional<int> port);
  api::Status agent_heartbeat(const std::string& id);
  api::Status agent_exit(const std::string& id, int exit_code);
  api::Status agent_wait_release(const std::string& id, ReleaseCallback done);
  std::optional<std::string> worker_for_agent_token(const std::string& token) const;
  // The daemon URL agents use, and a worker's metrics token (clusters hand
  // both to mpirun's ranks so that rank 0 can report training metrics).
  const std::string& agent_url() const { return options_.agent_url; }
  std::string metrics_token(const std::string& id) const {
    return options_.metrics_token ? options_.metrics_token(id) : std::string();
  }
  // Seconds since the least recent heartbeat of a running worker (0: none runs).
  double max_heartbeat_age_seconds() const;

  // Clusters: hands a held worker its env and files.
  api::Status release(const std::string& id, Release release);
  int subscribe(Listener listener);
  void unsubscribe(int handle);

  void tick();

  // Awaits waiting right now (tests, diagnostics).
  size_t pending_awaits() const;

  // The backend the workers run on (clusters ask it to preflight mpi hosts).
  workers::Backend& backend() const { return backend_; }

 private:
  struct Record;
  struct Waiter;
  struct ReleaseWaiter;
  // Work gathered under the mutex and done after it is released.
  struct Effects {
    std::vector<api::Worker> changed;
    std::vector<std::function<void()>> callbacks;
    std::vector<std::string> to_stop;
  };

  // Both write the record to the store (or to deferred_); on a store error
  // transition() leaves the record as it was and returns the error.
  [[nodiscard]] api::Status transition(Record& r, api::WorkerStatus to, std::string reason, Effects& fx);
  [[nodiscard]] api::Status persist(const Record& r);
  void stop_processes(const std::vector<std::string>& ids);
  // tick() for a `scheduling` worker of a queueing backend.
  void tick_queued(Record& r, const workers::ProcessStatus& process, TimePoint now, Effects& fx);
  void settle_waiters(Effects& fx, bool at_tick);
  void run(Effects fx);
  void stopper_loop();

  RegistryOptions options_;
  GpuInventory no_gpus_;  // options_.gpus when none was given
  workers::Backend& backend_;
  Store* store_;
  const Clock& clock_;

  mutable std::mutex mu_;
  // While set (under mu_), persist() collects here and the caller writes
  // the batch in one transaction (a launch of 64 is one commit, not 128).
  std::vector<StoredRecord>* deferred_ = nullptr;
  std::map<std::string, Record> records_;
  std::unordered_map<std::string, std::string> token_to_id_;
  uint64_t next_seq_ = 1;
  std::list<std::shared_ptr<Waiter>> waiters_;
  std::list<ReleaseWaiter> release_waiters_;
  std::map<int, Listener> listeners_;
  int next_listener_ = 1;

  // Stops triggered by timeouts run here, so tick() never waits a grace.
  std::mutex stop_mu_;
  std::condition_variable stop_cv_;
  std::deque<std::string> stop_queue_;
  bool stopping_ = false;
  std::thread stopper_;
};

}  // namespace muster::service
