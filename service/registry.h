// WorkerRegistry: every worker this daemon knows, its state machine, and the
// server side of await.
//
// Data path: routes (worker_routes.cc, agent_routes.cc) validate a request
// and call one method here; the registry updates its records under one mutex,
// persists them to the Store, and asks the Backend to start or stop agents.
// Agents report back (register / heartbeat / exit, api/agent_protocol.h)
// through the agent routes, which land in the agent_* methods.
//
// Launch: launch() validates, writes every record of the batch (status
// `scheduling`) to the store in one transaction, queues the backend work and
// returns; it never waits for the backend (an ssh or container start takes
// seconds per worker). A launch thread then asks the backend to start the
// batch: on success the workers become `starting` (their process identities
// are stored); if the backend fails for any worker, every worker of the
// batch is stopped and ends `failed` with the backend's reason. A daemon that
// dies in between leaves `scheduling` records, which restore() fails (their
// agents, if any started, are refused at registration and exit).
//
// Threads: any method may be called from any thread (the HTTP handler pool).
// Nothing here blocks waiting for a worker: await_workers() and
// agent_wait_release() take a callback that is called once, later, from
// whichever thread makes the awaited change (or from tick() at the deadline).
// Callbacks, subscriber notifications and backend calls always run outside
// the registry's mutex. The daemon calls tick() every ~100 ms from one thread:
// it applies the startup and heartbeat timeouts, notices agents that died,
// and ends awaits at their deadline. Time comes only from the injected Clock,
// so unit tests drive every timeout with a FakeClock and a fake Backend (and
// async_backend=false, so that backend work runs before the call returns).
//
// The parts, one file each: registry.cc (records, state machine, queries,
// stop), registry_launch.cc (launch and its backend step),
// registry_persistence.cc + worker_record.h (the stored record, restore),
// registry_waiters.cc (await, release long-polls), registry_agents.cc
// (agent calls), registry_tick.cc (timeouts), task_queue.h (the threads
// backend work runs on).
//
// For clusters (service/cluster_*.cc): launch() takes a cluster_id and
// per-worker extras (env, hold, reserve_port); a held worker's agent
// registers (status running, ip and reserved port known) and then waits
// until release() hands it env and files; subscribe() reports every status
// change (a launch the backend failed shows up as `failed` workers); stop()
// ends workers.
#pragma once

#include <chrono>
#include <filesystem>
#include <functional>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "api/agent_protocol.h"
#include "api/status.h"
#include "api/worker.h"
#include "service/clock.h"
#include "service/gpu_inventory.h"
#include "service/store.h"
#include "service/task_queue.h"
#include "service/worker_python.h"
#include "service/worker_record.h"
#include "workers/backend.h"

namespace muster::service {

struct RegistryOptions {
  std::filesystem::path state_dir;    // worker dirs: <state_dir>/workers/<id>/
  std::filesystem::path project_dir;  // MUSTER_PROJECT_DIR of every worker
  std::filesystem::path agent_path;   // muster-agent (tests may substitute)
  // The daemon's listen port. Agents reach the daemon at
  // api::agent_url(backend.master_address(), daemon_port): the backend is the
  // one that says which address its workers can reach.
  int daemon_port = 0;
  // Each worker's output.log: its size cap and rotated files kept (musterd
  // --worker-log-max-size, --worker-log-keep; api/log_capture.h). Clusters
  // cap their launcher's log the same.
  base::RotatingLogOptions worker_log;
  std::chrono::milliseconds startup_timeout{60'000};
  std::chrono::milliseconds heartbeat_timeout{10'000};
  std::chrono::milliseconds heartbeat_interval{2'000};
  std::chrono::milliseconds stop_grace{3'000};
  std::chrono::milliseconds release_poll{25'000};  // wait-release long-poll bound
  // await with wait_for_completion=false counts a worker as running once its
  // script has run this long (or at the deadline), so a script that dies at
  // once (an ImportError) is reported as the failure it is, not as running.
  // Held workers (clusters) count at once: their script has not started.
  std::chrono::milliseconds await_settle{1'000};
  // Called (under the registry's mutex: it must only record) with the time
  // between two heartbeats of one worker, for /metrics.
  std::function<void(double seconds)> on_heartbeat_gap;
  // A worker's metrics token (service/auth.h), given to its script as
  // MUSTER_METRICS_TOKEN; unset: none is given.
  std::function<std::string(const std::string& worker_id)> metrics_token;
  // Backend work (launches, and stops caused by timeouts) runs on registry
  // threads (true) or inline before the call that caused it returns (false:
  // unit tests with a fake backend).
  bool async_backend = true;
  size_t launch_threads = 4;  // launches that talk to the backend at once
  // The host's GPUs (musterd --gpus / nvidia-smi). Null: none, so a launch
  // with nvidia_gpu > 0 is refused (409). A worker with nvidia_gpu=k gets k
  // devices (CUDA_VISIBLE_DEVICES / NVIDIA_VISIBLE_DEVICES, the worker's
  // gpu_devices) until it ends; a restarted daemon takes back the devices of
  // the workers it adopts.
  GpuInventory* gpus = nullptr;
  // Where workers find muster's Python package and runtime extension
  // (worker_python.h): added to every worker's PYTHONPATH and
  // MUSTER_RUNTIME_PATH, after what the user set. Empty: nothing is added.
  WorkerPython worker_python{};
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

// What a held worker's agent receives (defined with the agent protocol).
using Release = api::Release;

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
  // starting/running ones wait for their agents (timeouts count from now);
  // scheduling ones of a backend that does not queue failed (the launch
  // never reached the backend).
  api::Status restore();

  // Returns the batch's workers once their records are stored and the
  // backend work is queued (see "Launch" above). An error (bad per-worker
  // options, too few GPUs, a store or directory failure) means no worker of
  // the batch exists.
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
  // The same with the stopped workers' reason (a cluster's tasks: "cluster
  // c-1a2b succeeded"); stop(ids) says "stopped through the API".
  api::Result<std::vector<api::Worker>> stop(const std::vector<std::string>& ids, const std::string& reason);

  // Agent calls; each is authorised for `id` already.
  api::Result<bool> agent_register(const std::string& id, const std::string& ip, std::optional<int> port);
  api::Status agent_heartbeat(const std::string& id);
  api::Status agent_exit(const std::string& id, int exit_code);
  api::Status agent_wait_release(const std::string& id, ReleaseCallback done);
  std::optional<std::string> worker_for_agent_token(const std::string& token) const;
  // The daemon URL agents use (MUSTER_URL), and a worker's metrics token
  // (clusters hand both to mpirun's ranks so that rank 0 can report
  // training metrics).
  std::string agent_url() const;
  std::string metrics_token(const std::string& id) const {
    return options_.metrics_token ? options_.metrics_token(id) : std::string();
  }
  // Where workers find muster's Python parts (clusters hand it to mpirun's ranks).
  const WorkerPython& worker_python() const { return options_.worker_python; }
  // Seconds since the least recent heartbeat of a running worker (0: none runs).
  double max_heartbeat_age_seconds() const;

  // Clusters: hands a held worker its env and files.
  api::Status release(const std::string& id, Release release);
  int subscribe(Listener listener);
  void unsubscribe(int handle);
  // The cap and rotation of every worker's log (clusters use it for their launcher's).
  const base::RotatingLogOptions& log_limits() const { return options_.worker_log; }

  void tick();

  // Awaits waiting right now (tests, diagnostics).
  size_t pending_awaits() const;
  // Waits until every queued launch reached the backend and came back
  // (tests; clusters need not: they follow the workers' statuses).
  void wait_for_launches();
  // Before the backend shuts down: drops the launches not yet handed to the
  // backend (their records stay `scheduling`, which the next daemon fails)
  // and waits for the backend calls under way; later backend work is dropped.
  void shutdown();

  // The backend the workers run on (clusters ask it to preflight mpi hosts).
  workers::Backend& backend() const { return backend_; }

 private:
  using Record = WorkerRecord;
  struct Waiter {
    api::AwaitRequest request;
    std::optional<TimePoint> deadline;
    AwaitCallback done;
    std::set<std::string> ended_before;  // workers that had ended when the await came: a success there is none
  };
  struct ReleaseWaiter {
    std::string id;
    TimePoint deadline;
    ReleaseCallback done;
  };
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
  // Writes what persist() collected in deferred_ (one transaction).
  [[nodiscard]] api::Status flush_deferred(std::vector<StoredRecord>& rows);
  // The launch thread's step for one batch (registry_launch.cc).
  void start_batch(const std::vector<std::string>& ids, std::vector<workers::LaunchSpec> specs);
  void fail_batch(const std::vector<std::string>& ids, const std::string& reason);
  // Removes the records of a launch that failed before it was queued.
  void forget(const std::vector<std::string>& ids);
  void stop_processes(const std::vector<std::string>& ids);
  // tick() for a `scheduling` worker of a queueing backend.
  void tick_queued(Record& r, const workers::ProcessStatus& process, TimePoint now, Effects& fx);
  void expire_release_waiters(TimePoint now, Effects& fx);
  void settle_waiters(Effects& fx, bool at_tick);
  void run(Effects fx);

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

  // Last, so that their threads end before anything they use goes.
  TaskQueue stops_;     // stops caused by timeouts, so tick() never waits a grace
  TaskQueue launches_;  // the backend step of each launch
};

}  // namespace muster::service
