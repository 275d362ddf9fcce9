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
// Admission (service/admission.h): with a `capacity` (the local and container
// backends' host), launch() counts the CPUs and memory of the workers there
// that have not ended (a waiting worker holds nothing) against it. A plain
// launch is admitted worker by worker, as a scheduler places pods; a cluster's
// launch (launch_together(), every batch of it) as one, so a cluster never
// runs half. With `overcommit` (musterd's default) every worker is admitted
// and a launch past the capacity is answered with a warning naming the totals.
// Without it, a worker (or cluster) that does not fit stays `scheduling` with
// the reason ("waiting for 2 CPUs: 4 of 2 requested") and the answer says so;
// tick() admits the waiting ones, in launch order, each as soon as it fits (a
// later, smaller one may start first); one that could not fit on the empty
// host is refused (409). A waiting worker is not with the backend yet: it has
// no startup timeout, and a stop ends it at once. A restarted daemon fails it
// like any `scheduling` worker.
//
// Stop: stop() marks the workers `stopping`, asks the backend to signal
// their process trees (Backend::stop returns once they are signalled; the
// grace period and SIGKILL run on the backend's own threads), then records
// them `stopped`. A stop therefore answers in milliseconds whatever the
// grace, and a worker whose backend could not signal it keeps its status (the
// call fails naming it). An agent exit reported meanwhile ends the worker
// `stopped` too. The same path serves a cluster that stops one task to
// replace it: stop({id}, reason) and the worker is `stopped` with `reason`.
//
// Persistence: a launch is stored before it counts (a refused one leaves
// nothing behind, directories included). Every later change (registration,
// exit, stop, timeouts) is applied in memory first and then written; a write that fails leaves the record dirty, the store's health
// logs the episode once and /healthz says degraded, and tick() writes the
// dirty records again until the store takes them. So a full disk never
// keeps a stop from signalling or turns a clean exit into a failure.
//
// Bounds: at most `max_live` workers that have not finished (launch: 409
// beyond); finished workers outside clusters are forgotten (record, row and
// directory) once older than `retain_for` or beyond the newest
// `max_finished` (workers of a cluster go with their cluster); remove()
// deletes one finished worker on request; page() and page_by_id() hand out
// bounded pieces of the list.
//
// Threads: any method may be called from any thread (the HTTP handler pool).
// Nothing here blocks waiting for a worker: await_workers() and
// agent_wait_release() take a callback that is called once, later, from
// whichever thread makes the awaited change (or from tick() at the deadline).
// Callbacks, subscriber notifications and backend calls always run outside
// the registry's mutex. The daemon calls tick() every ~100 ms from one thread:
// it applies the startup and heartbeat timeouts, notices agents that died,
// writes dirty records, applies retention and ends awaits at their deadline.
// Time comes only from the injected Clock (deadlines on its monotonic now(),
// displayed times from wall()), so unit tests drive every timeout with a
// FakeClock and a fake Backend (and async_backend=false, so that backend
// work runs before the call returns).
//
// The parts, one file each: registry.cc (records, state machine, queries,
// stop), launch.cc (launch and its backend step),
// persistence.cc + worker_record.h (the stored record, restore,
// dirty records), waiters.cc (await, release long-polls),
// agents.cc (agent calls), tick.cc (timeouts),
// retention.cc (retention, remove).
//
// Logs that trail the exit: a backend whose copy of a worker's log can lag
// the agent's exit report (Backend::log_complete; kubernetes follows the
// pod's log from the kubelet) gets the report held: agent_exit() answers
// ok, the worker stays `running` (no heartbeat is expected any more), and
// tick() applies the exit as soon as the backend's log is complete, or
// after log_drain_timeout whatever the backend says (a broken kubelet holds
// nothing for long). So an await that answers, a cluster that sees the end,
// and the failure's reason (the log's last exception) all have the whole
// log. A stop of a worker whose exit is held applies that exit at once (the
// worker had ended before the stop, as on a backend without the lag). A
// held exit is not stored: a daemon restarted meanwhile learns the end from
// the backend's poll. Every other backend answers true at once: nothing is
// held there.
//
// Heartbeats at fleet scale: every running worker's agent heartbeats, so n
// workers cost the daemon n / interval requests a second (bench/fleet: about
// 50 us of a core each on the 2-core VM). Each register and heartbeat reply
// tells the agent its interval (api::AgentRegistered, AgentHeartbeatReply):
// heartbeat_interval while running workers / heartbeat_interval is within
// heartbeat_rate, else running / heartbeat_rate (10,000 workers at 2,500 a
// second: 4 s). The loss timeout counts in the interval last told to that
// worker: heartbeat_timeout x told / heartbeat_interval (5 missed beats at
// the defaults; 20 s at 4 s). A worker told a longer interval before the
// fleet shrank keeps its longer timeout until its next beat. What was told
// is not stored: restore() assumes what this daemon's budget gives the
// restored fleet (the same flags give the same).
//
// For clusters (service/cluster_*.cc): launch_together() takes every batch
// of a cluster (its task types) as one launch; each batch has a cluster_id and
// per-worker extras (env, hold, reserve_port); a held worker's agent
// registers (status running, ip and reserved port known) and then waits
// until release() hands it env and files; subscribe() reports every status
// change (a launch the backend failed shows up as `failed` workers); stop()
// ends workers; remove_finished() forgets the workers of a deleted cluster.
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
#include "api/base/task_queue.h"
#include "api/status.h"
#include "api/worker.h"
#include "service/admission.h"
#include "service/clock.h"
#include "service/gpu_inventory.h"
#include "service/store.h"
#include "service/worker_python.h"
#include "service/registry/token_index.h"
#include "service/registry/worker_record.h"
#include "workers/backend.h"

namespace muster::service {

// How many records the registry keeps (musterd --retain-finished,
// --max-finished-workers, --max-live-workers; docs/ARCHITECTURE.md, "Limits").
struct RetentionOptions {
  // A finished worker outside a cluster is forgotten this long after it
  // finished (monotonic time; restored records count from their finished_at).
  std::chrono::seconds retain_for{std::chrono::hours(24 * 7)};
  // ... or once more than this many finished workers outside clusters exist
  // (the oldest go first).
  size_t max_finished = 10'000;
  // Workers that have not finished, at most (a launch beyond: 409).
  size_t max_live = 4096;
};

struct RegistryOptions {
  std::filesystem::path state_dir;    // worker dirs: <state_dir>/workers/<id>/
  std::filesystem::path project_dir;  // MUSTER_PROJECT_DIR of every worker
  std::filesystem::path agent_path;   // muster-agent (tests may substitute)
  // The daemon's listen port. Agents reach the daemon at
  // api::agent_url(backend.master_address(), daemon_port): the backend is the
  // one that says which address its workers can reach.
  int daemon_port = 0;
  // The SHA-256 of the daemon's TLS certificate when it serves https
  // (service/tls_identity.h): agents get an https:// MUSTER_URL and pin it
  // (MUSTER_TLS_FINGERPRINT). "": plain http.
  std::string daemon_tls_fingerprint;
  // Each worker's output.log: its size cap and rotated files kept (musterd
  // --worker-log-max-size, --worker-log-keep; api/log_capture.h). Clusters
  // cap their launcher's log the same.
  base::RotatingLogOptions worker_log;
  std::chrono::milliseconds startup_timeout{60'000};
  std::chrono::milliseconds heartbeat_timeout{10'000};
  std::chrono::milliseconds heartbeat_interval{2'000};
  // The heartbeats a second the daemon budgets for ("Heartbeats at fleet
  // scale"); 0: every agent beats at heartbeat_interval, however many run.
  double heartbeat_rate = 2500;
  std::chrono::milliseconds stop_grace{3'000};
  std::chrono::milliseconds release_poll{25'000};  // wait-release long-poll bound
  // await with wait_for_completion=false counts a worker as running once its
  // script has run this long (or at the deadline), so a script that dies at
  // once (an ImportError) is reported as the failure it is, not as running.
  // Held workers (clusters) count at once: their script has not started.
  std::chrono::milliseconds await_settle{1'000};
  size_t sweep_all = 1000, sweep_ticks = 10;  // tick()'s sweep (tick.cc)
  // The longest an agent's exit report is held for the backend's copy of the
  // log to catch up (see "Logs that trail the exit").
  std::chrono::milliseconds log_drain_timeout{5'000};
  RetentionOptions retention;
  // Called (under the registry's mutex: it must only record) with the time
  // between two heartbeats of one worker and the interval it had been told
  // (seconds), for /metrics.
  std::function<void(double seconds, double told)> on_heartbeat_gap;
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
  // The workers' host, for admission (see "Admission" above); none: every
  // launch is admitted (ssh places workers by its inventory's slots, Slurm
  // queues them itself).
  std::optional<HostCapacity> capacity{};
  // Past the capacity: admitted with a warning (true), or waiting (false;
  // musterd --overcommit=false).
  bool overcommit = true;
  // Where workers find muster's Python package and runtime extension
  // (worker_python.h): added to every worker's PYTHONPATH and
  // MUSTER_RUNTIME_PATH, after what the user set. Empty: nothing is added.
  WorkerPython worker_python{};
};

// What restore() does with worker directories that have no record.
struct RestoreOptions {
  // false: refuse to start (the database was lost, emptied or rolled back
  // and would hide them); true: list each as a `lost` worker, logging it.
  bool adopt_orphans = false;
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

// One piece of the list, in launch order: up to `limit` workers from the
// cursor on; `next` is the cursor of the following piece (none: the end).
struct WorkerPage {
  std::vector<api::Worker> workers;
  std::optional<uint64_t> next;
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
  // never reached the backend). Rows that cannot be read are logged and
  // skipped. A directory under <state>/workers with content and no record is
  // refused (or adopted as `lost`, see RestoreOptions); an empty one (a
  // launch that died before its commit) is removed.
  api::Status restore(const RestoreOptions& options = {});

  // Returns the batch's workers once their records are stored and the
  // backend work is queued (see "Launch" above). An error (bad per-worker
  // options, too few GPUs, too many live workers, a store or directory
  // failure) means no worker of the batch exists, and no directory either.
  // `warnings`, when given, receives what the caller should be told (the
  // host overcommitted, workers waiting for room; see "Admission").
  api::Result<std::vector<api::Worker>> launch(const LaunchBatch& batch, std::vector<std::string>* warnings = nullptr);
  // Several batches as one launch (a cluster's task types): all or nothing,
  // admitted as one. The workers of each batch, in the batches' order.
  api::Result<std::vector<std::vector<api::Worker>>> launch_together(const std::vector<LaunchBatch>& batches,
                                                                     std::vector<std::string>* warnings = nullptr);
  std::vector<api::Worker> list() const;
  // Up to `limit` workers in launch order from cursor `from` (0: the start).
  WorkerPage page(uint64_t from, size_t limit) const;
  // Up to `limit` workers in id order after `after` ("" : from the first),
  // for the dashboard's snapshot pieces.
  std::vector<api::Worker> page_by_id(const std::string& after, size_t limit) const;
  api::Result<api::Worker> get(const std::string& id) const;
  api::Result<std::filesystem::path> log_path(const std::string& id) const;
  // How many workers are in each status (for /metrics).
  std::map<api::WorkerStatus, size_t> count_by_status() const;

  // Calls `done` once every worker settled (see api/openapi.yaml) or at the
  // deadline. Unknown ids: returns not_found and never calls `done`.
  api::Status await_workers(const api::AwaitRequest& request, AwaitCallback done);
  // Empty ids: every worker that has not finished. Returns the named workers
  // once their process trees are signalled (see "Stop" above).
  // `endings` gives a worker another terminal status than `stopped` (with
  // an exit code): the hosts of an mpi cluster end as their ranks did.
  struct Ending {
    api::WorkerStatus status = api::WorkerStatus::kStopped;
    std::optional<int> exit_code;
  };
  api::Result<std::vector<api::Worker>> stop(const std::vector<std::string>& ids,
                                             const std::string& reason = "stopped through the API",
                                             const std::map<std::string, Ending>& endings = {});
  // DELETE of one finished worker outside a cluster: its record, row and
  // directory. not_found, or conflict when it has not finished or belongs to
  // a cluster (delete the cluster).
  api::Status remove(const std::string& id);
  // Forgets finished workers of a cluster being deleted (ids not known are
  // skipped; a worker that has not finished is a conflict and nothing goes).
  api::Status remove_finished(const std::vector<std::string>& ids);

  // Agent calls; each is authorised for `id` already. A heartbeat counts from
  // when it arrived: `waited` is how long its request waited before this call.
  // `limits`: how the agent enforces them (api::AgentRegistration); none
  // from an older agent keeps the record's.
  // Both answer with the interval the agent heartbeats at from now on
  // ("Heartbeats at fleet scale"); register with hold too.
  api::Result<api::AgentRegistered> agent_register(const std::string& id, const std::string& ip,
                                                   std::optional<int> port,
                                                   const std::map<std::string, std::string>& limits = {});
  api::Result<std::chrono::milliseconds> agent_heartbeat(const std::string& id, std::chrono::nanoseconds waited = {});
  // The interval a reply gives now, and the running workers it is for.
  std::chrono::milliseconds heartbeat_interval_now() const;
  size_t running_workers() const;
  // `out_of_memory`: the kernel's OOM killer ended a process of the worker
  // (its cgroup said so); a failure then reads "out of memory (limit N GiB)".
  api::Status agent_exit(const std::string& id, int exit_code, bool out_of_memory = false);
  api::Status agent_wait_release(const std::string& id, ReleaseCallback done);
  std::optional<std::string> worker_for_agent_token(const std::string& token) const;
  // The daemon URL agents use (MUSTER_URL), and a worker's metrics token
  // (clusters hand both to mpirun's ranks so that rank 0 can report
  // training metrics).
  std::string agent_url() const;
  // "" or what agents pin (RegistryOptions::daemon_tls_fingerprint).
  const std::string& agent_tls_fingerprint() const { return options_.daemon_tls_fingerprint; }
  std::string metrics_token(const std::string& id) const {
    return options_.metrics_token ? options_.metrics_token(id) : std::string();
  }
  // Where workers find muster's Python parts (clusters hand it to mpirun's ranks).
  const WorkerPython& worker_python() const { return options_.worker_python; }
  // Seconds since the least recent heartbeat of a running worker (0: none runs).
  double max_heartbeat_age_seconds() const;
  // Records changed in memory that the store has not taken yet.
  size_t dirty_records() const;

  // Clusters: hands a held worker its env and files.
  api::Status release(const std::string& id, Release release);
  int subscribe(Listener listener);
  void unsubscribe(int handle);
  // The cap and rotation of every worker's log (clusters use it for their launcher's).
  const base::RotatingLogOptions& log_limits() const { return options_.worker_log; }

  void tick();

  // Awaits waiting right now (tests, diagnostics).
  size_t pending_awaits() const;
  // Waits until every queued launch reached the backend and came back, and
  // every queued stop was handed to the backend (tests; clusters need not:
  // they follow the workers' statuses).
  void wait_for_launches();
  // Before the backend shuts down: drops the launches not yet handed to the
  // backend (their records stay `scheduling`, which the next daemon fails)
  // and waits for the backend calls under way; later backend work is
  // dropped. Writes the dirty records a last time.
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
    size_t settled_prefix = 0;  // request.ids[0..settled_prefix) have settled
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
    std::vector<std::string> removed;  // forgotten: their directories go, then their rows
  };

  // The state machine's one step: in memory, then marked dirty (written by
  // write_dirty_locked()). A transition the machine does not allow is ignored.
  void transition(Record& r, api::WorkerStatus to, std::string reason, Effects& fx);
  // A stopping worker's end: its stop_as status (exit code) and stop_reason.
  void end_stopped(Record& r, Effects& fx);
  void mark_dirty(const Record& r) { dirty_.insert(r.worker.id); }
  // Heartbeats at fleet scale: the interval for running_ workers, and the
  // loss timeout of a worker told `told`.
  std::chrono::milliseconds heartbeat_interval_locked() const;
  std::chrono::milliseconds heartbeat_timeout_for(std::chrono::milliseconds told) const;
  // Every removal of a record from records_ goes through here (running_).
  void erase_locked(std::map<std::string, WorkerRecord>::iterator it);
  // Writes every dirty record in one transaction; on failure they stay
  // dirty (the store's health logs it) and tick() tries again.
  void write_dirty_locked();
  // The launch thread's step for one batch (launch.cc).
  void start_batch(const std::vector<std::string>& ids, std::vector<workers::LaunchSpec> specs);
  void fail_batch(const std::vector<std::string>& ids, const std::string& reason);
  // Admission: the CPUs and memory held by workers that have not ended and
  // are not waiting; admit_waiting_locked() admits what fits now, in launch
  // order, and updates the others' reasons.
  Demand in_use_locked() const;
  void admit_waiting_locked(Effects& fx);
  // The backend step of admitted workers, queued once the mutex is released.
  void queue_start(std::vector<std::string> ids, std::vector<workers::LaunchSpec> specs, Effects& fx);
  // Removes the records of a launch that failed before it was queued.
  void forget(const std::vector<std::string>& ids);
  // Drops finished records from memory (retention, remove); their rows and
  // directories go in finish_removal(), outside the mutex.
  void drop_locked(const std::string& id, Effects& fx);
  void finish_removal(const std::vector<std::string>& ids);
  void apply_retention(Effects& fx);
  // Asks the backend to end each worker's tree; errors are logged.
  void stop_processes(const std::vector<std::string>& ids);
  // tick() for a `scheduling` worker of a queueing backend.
  void tick_queued(Record& r, const workers::ProcessStatus& process, TimePoint now, Effects& fx);
  // The agent's exit report applied (agents.cc): `exception` is the log's
  // last exception line, read outside the mutex ("" for none).
  void apply_exit_locked(Record& r, int exit_code, bool out_of_memory, const std::string& exception, Effects& fx);
  // The log's last exception line for a failed exit ("" for code 0); file
  // I/O, never under the mutex.
  static std::string exit_exception(int exit_code, const std::filesystem::path& log);
  void expire_release_waiters(TimePoint now, Effects& fx);
  void settle_waiters(Effects& fx, bool at_tick);
  api::Status adopt_orphans_locked(const std::vector<std::string>& orphans, const RestoreOptions& options,
                                   Effects& fx);
  void run(Effects fx);

  RegistryOptions options_;
  GpuInventory no_gpus_;  // options_.gpus when none was given
  workers::Backend& backend_;
  Store* store_;
  const Clock& clock_;

  mutable std::mutex mu_;
  std::map<std::string, Record> records_;  // by id
  std::map<uint64_t, std::string> by_seq_;  // launch order
  TokenIndex token_to_id_;  // its own mutex: read by every agent request's authentication
  std::set<std::string> dirty_;  // changed in memory, not yet in the store
  uint64_t next_seq_ = 1;
  size_t running_ = 0;  // records in status running (transition(), restore, erase_locked())
  TimePoint last_retention_{};
  std::string sweep_cursor_;  // the last record tick() visited (the sweep)
  std::list<std::shared_ptr<Waiter>> waiters_;
  std::list<ReleaseWaiter> release_waiters_;
  std::map<int, Listener> listeners_;
  // Launches waiting for room (admission), in launch order: one entry per
  // plain worker, one per cluster launch.
  struct Waiting {
    std::vector<std::string> ids;
    std::vector<workers::LaunchSpec> specs;
  };
  std::list<Waiting> waiting_;
  int next_listener_ = 1;

  // Last, so that their threads end before anything they use goes.
  base::TaskQueue stops_;     // stops caused by timeouts and launches, off the caller's thread
  base::TaskQueue launches_;  // the backend step of each launch
};

}  // namespace muster::service
